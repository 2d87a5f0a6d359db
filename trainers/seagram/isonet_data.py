"""The released IsoNet benchmark splits (IsoNet++ ``large_dataset``), read without unpickling code.

IsoNet++ (``structlearning/isonetpp``) publishes, per dataset ``<name>`` in ``aids``,
``mutag``, ``ptc_fm``, ``ptc_fr``, ``ptc_mm``, ``ptc_mr``, 300 query graphs split
180 / 45 / 75 into train / val / test, 800 corpus graphs shared by all splits, and the induced
subgraph-isomorphism relation of every (query, corpus graph) pair, as pickles laid out as::

    <data_dir>/large_dataset/splits/<name>240k_corpus_subgraphs.pkl          list of nx.Graph
    <data_dir>/large_dataset/splits/<split>/<split>_<name>240k_query_subgraphs.pkl
    <data_dir>/large_dataset/splits/<split>/<split>_<name>240k_rel_nx_is_subgraph_iso.pkl
        {query index: {"pos": [corpus indices], "neg": [corpus indices]}}

The pickles are read by ``SafeUnpickler``, which admits exactly two globals:
``builtins.dict`` and ``networkx.classes.graph.Graph``, and the latter is *not* networkx's
class: it is ``_GraphState``, a plain record that keeps the pickled attribute dict, from which
only ``_node`` (the node order) and ``_adj`` (the neighbours) are read. Any other global (a
function, a class, ``os.system`` ...) fails the load with a clear error, so no code from a
file runs. Every file's SHA-256 is checked against ``RELEASED_SHA256`` (the released files,
hashed here) unless ``verify=False`` (synthetic files in the same format, as in the tests).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

from raylab.errors import UserError
from raylab.files import sha256_file

DATASETS = ("aids", "mutag", "ptc_fm", "ptc_fr", "ptc_mm", "ptc_mr")
"""The IsoNet benchmark datasets IsoNet++ releases splits of."""
SPLITS = ("train", "val", "test")
SOURCE_URL = "https://github.com/structlearning/isonetpp (folder large_dataset/)"
"""Where the released files come from (clone the repository; data_dir is its root)."""

RELEASED_SHA256 = {
    "large_dataset/splits/aids240k_corpus_subgraphs.pkl": "e681bfc961908c1abeaaa16aef003f2b8d35c149e0b83146e9792bc498032212",
    "large_dataset/splits/mutag240k_corpus_subgraphs.pkl": "6cbc770a758a7b3693a75e875c3e7de30d68c37df25e60f7ce8d0f5391baefcd",
    "large_dataset/splits/ptc_fm240k_corpus_subgraphs.pkl": "467d75134f64807ac5cb2ce7fe45038dac5fb355df96b17de0b63e629937b91c",
    "large_dataset/splits/ptc_fr240k_corpus_subgraphs.pkl": "0ea47fb2b70491f4f240c26bcb01a6c07cad803576d2f79c259c2a4719e781ae",
    "large_dataset/splits/ptc_mm240k_corpus_subgraphs.pkl": "2ee8793e736153de3e66ac0377e8a109ffa1cdbd6ef6658f51439cd5d3521a60",
    "large_dataset/splits/ptc_mr240k_corpus_subgraphs.pkl": "8c47a9c81d062ea07063002af84526ffd15d3b0c3f9b058aa8ef556dd9035b48",
    "large_dataset/splits/test/test_aids240k_query_subgraphs.pkl": "d14af3e2c88322f1174d92d6e697f9142e256b31753b4fa86fde14bd890d5be6",
    "large_dataset/splits/test/test_aids240k_rel_nx_is_subgraph_iso.pkl": "448e62899df863d331422733db37509b4b136c0985c678b96de219ccc2841d55",
    "large_dataset/splits/test/test_mutag240k_query_subgraphs.pkl": "5832e42b0e9604aae95bad88c6a3ecbf4ed1526d61e6d60ec51c55dfded286df",
    "large_dataset/splits/test/test_mutag240k_rel_nx_is_subgraph_iso.pkl": "8918723729725de9f53b791063597d038a06c2ebb435e7ea040ae722c21576bd",
    "large_dataset/splits/test/test_ptc_fm240k_query_subgraphs.pkl": "f5b61497d97907c6f2789bb209000fb322860a2943957e444c9d161306eef62b",
    "large_dataset/splits/test/test_ptc_fm240k_rel_nx_is_subgraph_iso.pkl": "aff1c8e1c42a704ea4560eb4ff3d93d219116622abd93a5d19c1202d8f7afd2b",
    "large_dataset/splits/test/test_ptc_fr240k_query_subgraphs.pkl": "62d6e0599e9324af51a115b70a829c35617d929932a136adfeae664e68cd69d7",
    "large_dataset/splits/test/test_ptc_fr240k_rel_nx_is_subgraph_iso.pkl": "eb19af467b8bc94bd5047f0332c9c660e2b2ef2b85a2ffef9a23f47c076e8871",
    "large_dataset/splits/test/test_ptc_mm240k_query_subgraphs.pkl": "6b1fda5a4c33c589365e69dd2b662195165da94666919aecc877022e2a5bcd3f",
    "large_dataset/splits/test/test_ptc_mm240k_rel_nx_is_subgraph_iso.pkl": "fb4589aec6993e6e97be5cdd242e11592b5e64dc570e129255c871b77c933739",
    "large_dataset/splits/test/test_ptc_mr240k_query_subgraphs.pkl": "4ecb70ff2c3977ce550a10b6e8e652fb43358a27458620014d588f9e1d915641",
    "large_dataset/splits/test/test_ptc_mr240k_rel_nx_is_subgraph_iso.pkl": "b8a2975ce78d414d67bac3a6bd7ddd8eb14524f68496676555669b5fe92eb310",
    "large_dataset/splits/train/train_aids240k_query_subgraphs.pkl": "1e5c033bf85838a3528a0a6a151bf4c9a40571f539af819d2838b0f044d163a5",
    "large_dataset/splits/train/train_aids240k_rel_nx_is_subgraph_iso.pkl": "d7a7808aeab95c35e83135e00f21b61cf07aa285a88086055aed4f3b3df0304e",
    "large_dataset/splits/train/train_mutag240k_query_subgraphs.pkl": "b6b1a5d414a58df666831f2466e96c747da44fa5c9cebe53317cc4f7e3dd9133",
    "large_dataset/splits/train/train_mutag240k_rel_nx_is_subgraph_iso.pkl": "2b334ddef100702923f0399ba24861a1c50caa21406e4e0f6ad171c78addd6fa",
    "large_dataset/splits/train/train_ptc_fm240k_query_subgraphs.pkl": "b8ecd1af816145af215cd4cbd0bac1d4da873e41462a366aed4d061f212b39e0",
    "large_dataset/splits/train/train_ptc_fm240k_rel_nx_is_subgraph_iso.pkl": "d4edca90189a240484186283b7117a1932fb8a2cab44f9c1118833b64d12fba6",
    "large_dataset/splits/train/train_ptc_fr240k_query_subgraphs.pkl": "e6b16626af5ec553210475df079af95463cac6e2f8b17c358c7be0d7bdd250cf",
    "large_dataset/splits/train/train_ptc_fr240k_rel_nx_is_subgraph_iso.pkl": "c34c778918cfc4dc999d1e1a7985fb1d09ed790152a740d9fbf52c443f745248",
    "large_dataset/splits/train/train_ptc_mm240k_query_subgraphs.pkl": "fd12f3b5e344746efc82438f792dd9846346acc18aef40a4a8c39d899c6730c0",
    "large_dataset/splits/train/train_ptc_mm240k_rel_nx_is_subgraph_iso.pkl": "333d93400c1c757855c6eae86546f8ecd8432d67d130d123dccf03fa1e828669",
    "large_dataset/splits/train/train_ptc_mr240k_query_subgraphs.pkl": "08341df31ffd82aa4183496f573db9c933790e39c1d391ccc392e6d8bbb44f7b",
    "large_dataset/splits/train/train_ptc_mr240k_rel_nx_is_subgraph_iso.pkl": "31162c4095d81941952c287ec9bec384ef61a762969b5d7faa34d8ca7fbffc30",
    "large_dataset/splits/val/val_aids240k_query_subgraphs.pkl": "6317e1c86f1ee18a57eb797751dbe72fd3ab0fb4bd9895767397950b56ce005f",
    "large_dataset/splits/val/val_aids240k_rel_nx_is_subgraph_iso.pkl": "d88b5cffab6fb64c1377f5b750506e40c7fbc44b7e5cadea1e40318f6f365145",
    "large_dataset/splits/val/val_mutag240k_query_subgraphs.pkl": "c108648b184e4de338ceb542ca47b30e179131fe8855dc8eb31fb8a3f9ab94fe",
    "large_dataset/splits/val/val_mutag240k_rel_nx_is_subgraph_iso.pkl": "6f718464a880aeb91d366b4ecfd3fe4f6a016e1a6fab22c1b600cffca1486395",
    "large_dataset/splits/val/val_ptc_fm240k_query_subgraphs.pkl": "066d40a1ac6921a834cf8d413eac99869678698317ddb2afd6b0d521cb311bf5",
    "large_dataset/splits/val/val_ptc_fm240k_rel_nx_is_subgraph_iso.pkl": "148d6814e927e6bd7706cce297fbf9bf9e66c6c6843a09437c757a649f068495",
    "large_dataset/splits/val/val_ptc_fr240k_query_subgraphs.pkl": "c5277eb970c7550b9f15a8b9081ac2f3108429d1d7970434b2b9e50c661ca8dd",
    "large_dataset/splits/val/val_ptc_fr240k_rel_nx_is_subgraph_iso.pkl": "b9ef39430db2f292bfab3c57c0677de98144a5d98de44a2455cbae224c4ca287",
    "large_dataset/splits/val/val_ptc_mm240k_query_subgraphs.pkl": "e2661d9bb048347870a7e577ce09a75bae812297bb6b9320dcc91034f34ec072",
    "large_dataset/splits/val/val_ptc_mm240k_rel_nx_is_subgraph_iso.pkl": "721a7b2d6b2aa3664c485a82ca09e9567f74385465fe1d0adc762f181a9adcc0",
    "large_dataset/splits/val/val_ptc_mr240k_query_subgraphs.pkl": "e3c067abe2a8188619012d31e869dc195e5ad29e3d1d5c303a7cfd59f7893107",
    "large_dataset/splits/val/val_ptc_mr240k_rel_nx_is_subgraph_iso.pkl": "8493e4278ed4ec8c9516a3647cf7303f6a03d9afc3ae54163d917467e70527d6",
}
"""SHA-256 of each released file, keyed by its path under ``data_dir``."""


def released_paths(name: str) -> dict[str, str]:
    """The relative paths of dataset ``name``'s files: ``corpus`` and ``<split>_queries`` /
    ``<split>_relation`` for each split."""
    base = "large_dataset/splits"
    out = {"corpus": f"{base}/{name}240k_corpus_subgraphs.pkl"}
    for split in SPLITS:
        out[f"{split}_queries"] = f"{base}/{split}/{split}_{name}240k_query_subgraphs.pkl"
        out[f"{split}_relation"] = f"{base}/{split}/{split}_{name}240k_rel_nx_is_subgraph_iso.pkl"
    return out


class _GraphState:
    """Stands in for ``networkx.classes.graph.Graph`` while unpickling: keeps the state dict."""

    def __setstate__(self, state):
        if not isinstance(state, dict):
            raise pickle.UnpicklingError("a pickled Graph whose state is not a dict")
        self.state = state


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that resolves only ``builtins.dict`` and (to ``_GraphState``) nx ``Graph``."""

    ALLOWED = {("builtins", "dict"): dict, ("networkx.classes.graph", "Graph"): _GraphState}

    def find_class(self, module, name):
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed") from None


def safe_load(path: Path):
    """Unpickle ``path`` with ``SafeUnpickler``; a forbidden global is a ``UserError``."""
    try:
        return SafeUnpickler(io.BytesIO(Path(path).read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise UserError(f"{path}: not a released IsoNet pickle ({e})") from None


def graph_adjacency(graph, path: Path) -> np.ndarray:
    """The 0/1 adjacency matrix of an unpickled graph, nodes in their stored order."""
    state = graph.state if isinstance(graph, _GraphState) else None
    if state is None or not isinstance(state.get("_node"), dict) or not isinstance(state.get("_adj"), dict):
        raise UserError(f"{path}: holds something other than networkx graphs")
    index = {node: i for i, node in enumerate(state["_node"])}
    adj = np.zeros((len(index), len(index)), dtype=np.uint8)
    for u, nbrs in state["_adj"].items():
        for v in nbrs:
            if u not in index or v not in index or u == v:
                raise UserError(f"{path}: a graph with an edge ({u!r}, {v!r}) outside its nodes or a self-loop")
            adj[index[u], index[v]] = 1
    if not np.array_equal(adj, adj.T):
        raise UserError(f"{path}: a graph whose adjacency is not symmetric")
    return adj


def _graphs(path: Path) -> list[np.ndarray]:
    items = safe_load(path)
    if not isinstance(items, list):
        raise UserError(f"{path}: expected a list of graphs, got {type(items).__name__}")
    return [graph_adjacency(g, path) for g in items]


def _relation(path: Path, n_queries: int, n_corpus: int) -> np.ndarray:
    rel = safe_load(path)
    if not isinstance(rel, dict) or sorted(rel) != list(range(n_queries)):
        raise UserError(f"{path}: expected a dict keyed by query index 0..{n_queries - 1}")
    labels = np.full((n_queries, n_corpus), -1, dtype=np.int8)
    for q, entry in rel.items():
        for key, value in (("pos", 1), ("neg", 0)):
            idx = np.asarray(entry.get(key, []) if isinstance(entry, dict) else [], dtype=np.int64)
            if idx.size and (idx.min() < 0 or idx.max() >= n_corpus):
                raise UserError(f"{path}: query {q}: {key} index outside the corpus of {n_corpus}")
            labels[q, idx] = value
    if (labels < 0).any():
        q = int(np.flatnonzero((labels < 0).any(1))[0])
        raise UserError(f"{path}: query {q}: some corpus graphs are neither pos nor neg")
    return labels


def check_present(data_dir: Path, name: str) -> None:
    """Fail with one line naming the first missing file and where to get the release."""
    if name not in DATASETS:
        raise UserError(f"dataset: {name!r} is not a released IsoNet dataset; valid: {', '.join(DATASETS)}")
    for rel in released_paths(name).values():
        if not (Path(data_dir) / rel).is_file():
            raise UserError(
                f"data_dir: IsoNet dataset {name} not found: no {Path(data_dir) / rel}; "
                f"get large_dataset/ from {SOURCE_URL} and set data_dir to the folder "
                f"that holds it"
            )


def load_released(data_dir: str | Path, name: str, verify: bool = True):
    """The released splits of ``name`` as arrays.

    Returns ``(corpus, queries, labels, splits, sha256)``: corpus and query adjacency matrices,
    the ``[300, 800]`` int8 label matrix (queries in the order train, val, test), the query
    indices of each split, and the SHA-256 of every file read. ``verify``: check each file
    against ``RELEASED_SHA256``.
    """
    data_dir = Path(data_dir)
    check_present(data_dir, name)
    paths = released_paths(name)
    sha = {}
    for rel in paths.values():
        sha[rel] = sha256_file(data_dir / rel)
        if verify and RELEASED_SHA256.get(rel) != sha[rel]:
            raise UserError(
                f"{data_dir / rel}: SHA-256 {sha[rel][:16]}... is not the released "
                f"file's ({RELEASED_SHA256.get(rel, '?')[:16]}...); re-fetch it from "
                f"{SOURCE_URL}"
            )
    corpus = _graphs(data_dir / paths["corpus"])
    queries, rows, splits, start = [], [], {}, 0
    for split in SPLITS:
        qs = _graphs(data_dir / paths[f"{split}_queries"])
        rows.append(_relation(data_dir / paths[f"{split}_relation"], len(qs), len(corpus)))
        queries += qs
        splits[split] = np.arange(start, start + len(qs))
        start += len(qs)
    return corpus, queries, np.concatenate(rows), splits, sha


# ------------------------------------------------------------------------ writing (tests)


def write_released(
    data_dir: str | Path,
    name: str,
    corpus: list[np.ndarray],
    queries: dict[str, list[np.ndarray]],
    labels: dict[str, np.ndarray],
) -> None:
    """Write graphs and labels in the released layout and format (networkx graphs, pos/neg
    dicts): synthetic stand-ins for tests and for data made elsewhere."""
    import networkx as nx

    def graph(adj):
        g = nx.Graph()
        g.add_nodes_from(range(adj.shape[0]))
        g.add_edges_from((int(u), int(v)) for u, v in zip(*np.nonzero(np.triu(adj, 1))))
        return g

    paths = released_paths(name)
    data_dir = Path(data_dir)

    def dump(rel, obj):
        path = data_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(obj, protocol=4))

    dump(paths["corpus"], [graph(a) for a in corpus])
    for split in SPLITS:
        dump(paths[f"{split}_queries"], [graph(a) for a in queries[split]])
        dump(
            paths[f"{split}_relation"],
            {
                q: {"pos": np.flatnonzero(row == 1).tolist(), "neg": np.flatnonzero(row == 0).tolist()}
                for q, row in enumerate(labels[split])
            },
        )
