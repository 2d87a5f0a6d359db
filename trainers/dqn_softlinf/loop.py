"""DQN with a fixed target network and an MSE, Huber or soft-linf inner-loop surrogate.

One loop, read top to bottom: N environments step together (one batched forward pass picks
all N epsilon-greedy actions), each step's newest frames go into a frame-deduplicated replay
(replay.py), one gradient update runs per ``train_every`` agent steps on a uniformly sampled
batch, and every ``target_period`` agent steps the target network is replaced by the online
one. Each target period is one inner regression loop of the paper: the frozen targets
``T Q_target`` are regressed on with the chosen surrogate (loss.py).

Measured on an in-sample probe set of ``probe_size`` replay transitions (drawn with the
probe's own generator, afresh at every target update, fixed for that period):

- ``inner/regression_linf``: max |Q(s,a) - y_target(s,a)| at the end of a period (how well
  the inner loop fit its frozen one-sample targets), and ``inner/progress_ratio``: that value
  over its value at the start of the period (where Q = Q_target). Averaged over the periods
  completed since the previous report.
- ``bellman/residual_{linf,p99,l2}_insample``: the max, 99th percentile and root mean square of
  |Q(s,a) - (r + gamma (1 - d) max_a' Q(s',a'))| with the current network on both sides and
  the one recorded successor: a one-sample, in-sample estimate of |Q - TQ|, at each report.

Where the emulator or the model allows better: on Atari a held-out probe (heldout.py:
``*_heldout`` on transitions never trained on, ``*_expected`` against K redrawn successors),
and on environments with a known model (FeatureMDP) the exact quantities (exact.py:
``bellman/residual_linf_exact``, ``bellman/qstar_dist_linf``, the greedy policy's value, and
the inner loop's exact progress ``inner/regression_linf_exact`` = max |Q - T Q_target| at the
end of a period and ``inner/progress_ratio_exact``, that over the target's own exact residual).

On Atari the emulators step in C++ threads while the update runs (``overlap_env``): the
updates of a vector step sample the replay as it was before that step's transitions arrive.

Where the replay lives (``replay_on_device``, auto: on a CUDA device only): on the host,
each update draws its batch with numpy and sends the batch's contiguous frame window and one
array of (action, reward, done) to the device, two copies; on the device (device_replay.py),
the batch is drawn and gathered there, and the whole update (draw, gather, forward, backward,
optimizer step) can be captured as one CUDA graph (``cuda_graph``, cuda_graph.py). Acting then
reads each env's observation from the ring and draws epsilon-greedy on the device: one read of
the device per vector step, the actions the emulators need, with the held-out game's greedy
action in the same forward pass and the same read. The held-out game's emulator step (and its
state saved before it) runs in a thread of its own beside the update (``HELDOUT_THREAD``), and
a vector step's rows reach the device replay in one copy (``DeviceFrameReplay.add_step``).
"""

from __future__ import annotations

import collections
import concurrent.futures
import copy
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from raylab import session
from raylab.accel import AUTO, compiled, enabled, to_device
from raylab.checkpoint import GlobalRNG, LoopState, saved_only
from raylab.config import from_dict
from raylab.seeds import derive_seed
from trainers.dqn_softlinf.ale_probe import life_lost
from trainers.dqn_softlinf.config import Config, frame_mark_metric, frames_per_step
from trainers.dqn_softlinf.cuda_graph import GraphedStep, warn
from trainers.dqn_softlinf.device_replay import DeviceFrameReplay
from trainers.dqn_softlinf.envs import env_seed, make_envs
from trainers.dqn_softlinf.evaluation import DeviceEvalActor
from trainers.dqn_softlinf.exact import bellman_operator, exact_metrics, optimal_q
from trainers.dqn_softlinf.heldout import HeldoutProbe
from trainers.dqn_softlinf.loss import effective_beta, effective_sample_size, soft_linf_weights, surrogate
from trainers.dqn_softlinf.model import q_network
from trainers.dqn_softlinf.optim import CenteredRMSprop
from trainers.dqn_softlinf.preflight import preflight
from trainers.dqn_softlinf.replay import FrameReplay
from trainers.dqn_softlinf.shared_states import SharedStates
from trainers.dqn_softlinf.stats import TIME_AVERAGED, time_average, time_averaged_name

# seed streams (env_seed): every (trial seed, stream, index) gets its own block of env seeds
TRAIN_STREAM, RESUME_STREAM, EVAL_STREAM, HELDOUT_STREAM, PROBE_STREAM = range(5)
SAMPLE_STREAM, ACT_STREAM = 5, 6  # the device-side draws: replay batches, epsilon-greedy
HELDOUT_THREAD = True
"""Step the held-out game's emulator in a thread of its own, beside the update (its action is
chosen in the training thread, from the acting forward pass: the same transitions either way)."""


@dataclass
class Run:
    """One trial's pieces, shared by the step functions below: the fixed ones (config, device,
    envs, networks, optimizer, replay, generators, the env's model where known) and the ones
    the loop moves on (the envs' current observations and episode bookkeeping, the probe)."""

    cfg: Config
    device: torch.device
    envs: object
    q: torch.nn.Module
    target: torch.nn.Module
    q_fwd: torch.nn.Module  # q, or q through torch.compile (raylab.accel.compiled)
    target_fwd: torch.nn.Module
    optimizer: torch.optim.Optimizer
    replay: FrameReplay | DeviceFrameReplay
    rng: np.random.Generator  # exploration and replay sampling
    probe_rng: np.random.Generator  # the in-sample probe's draws
    exact_model: tuple | None  # (P, R, continue prob) where the env's model is known
    q_star: np.ndarray | None
    sums: dict = field(default_factory=dict)  # on-device running sums of loss, Q and ESS
    probe: dict | None = None  # the current period's probe transitions and frozen targets
    heldout: HeldoutProbe | None = None  # Atari: the held-out probe (a game of its own)
    shared: SharedStates | None = None  # Atari: the state set every trial of a sweep shares
    eval_envs: object = None
    episodes: collections.deque = field(default_factory=lambda: collections.deque(maxlen=100))
    obs: np.ndarray | None = None
    lives: np.ndarray | None = None
    ep_return: np.ndarray | None = None
    final_prev: np.ndarray | None = None  # the previous step ended an episode: this one resets
    fire_next: np.ndarray | None = None
    sample_gen: torch.Generator | None = None  # replay on the device: the batches' draws
    act_gen: torch.Generator | None = None  # replay on the device: epsilon-greedy's draws
    capture: bool = False  # cuda_graph, resolved for this device and replay
    graph: GraphedStep | None = None  # the update as a CUDA graph, made by train_loop
    epsilon_dev: torch.Tensor | None = None  # acting on the device: epsilon as a device scalar
    compute_dtype: torch.dtype | None = None  # the update's forward output dtype (bf16 under autocast)
    heldout_thread: concurrent.futures.ThreadPoolExecutor | None = None  # the held-out game's steps


def train_loop(config: dict) -> None:
    cfg = from_dict(Config, config, "trial config")
    if cfg.backend == "rllib":
        from trainers.dqn_softlinf.rllib_learner import train_rllib

        return train_rllib(cfg, config)
    preflight(cfg)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    run = build_run(cfg, session.device())
    st = DQNState.of(run, config)
    saved = session.restore()
    if saved is None:
        first_episodes(run)
    else:
        st.load_state_dict(saved)
        resume(run, st)
    prepare(run, st)
    clock = (time.perf_counter(), st.env_steps)
    while st.env_steps < cfg.total_steps:
        vector_step(run, st)
        if st.env_steps >= st.next_sync and st.env_steps >= st.updates_from:
            target_update(run, st)
            while st.next_sync <= st.env_steps:
                st.next_sync += cfg.target_period
        last = st.env_steps >= cfg.total_steps
        if st.env_steps >= st.next_report or last:
            report(run, st, clock, last)
            clock = (time.perf_counter(), st.env_steps)
    close(run)


def first_episodes(run: Run) -> None:
    """A fresh trial: the envs' first episodes from the training seed block, their first frames
    in the replay."""
    n = run.cfg.num_envs
    run.obs, run.lives = run.envs.reset(env_seed(run.cfg.seed, TRAIN_STREAM))
    run.ep_return = np.zeros(n, np.float64)
    run.final_prev, run.fire_next = np.zeros(n, bool), np.zeros(n, bool)
    run.replay.add_observation(run.envs.newest_frame(run.obs), first=np.ones(n, bool), final=run.final_prev)


def prepare(run: Run, st: DQNState) -> None:
    """What a trial builds after its restore, fresh or resumed: the episode window, the
    held-out and shared probes (never checkpointed), the running sums on the device and the
    update's CUDA graph (it holds the tensors it is captured with)."""
    cfg = run.cfg
    run.episodes = collections.deque(st.episodes, maxlen=100)
    if cfg.suite == "atari" and cfg.heldout_size:  # not checkpointed: a resumed trial refills it
        run.heldout = HeldoutProbe(cfg, env_seed(cfg.seed, HELDOUT_STREAM, st.starts))
    if cfg.suite == "atari" and cfg.shared_states:  # built the same in every trial: not checkpointed
        run.shared = SharedStates(cfg)
    run.sums = {k: torch.zeros((), device=run.device) + getattr(st, f"{k}_sum") for k in ("loss", "q", "ess")}
    if run.capture:
        run.graph = update_graph(run)


def vector_step(run: Run, st: DQNState) -> None:
    """One step of the N envs: epsilon-greedy actions, the updates it pays for (on Atari while
    the emulators step), its transitions into the replay, the episodes' bookkeeping."""
    cfg, envs, replay, n = run.cfg, run.envs, run.replay, run.cfg.num_envs
    epsilon = epsilon_at(cfg, st.env_steps)
    actions, heldout_greedy = choose_actions(run, epsilon)
    if envs.fire_action is not None:
        actions = np.where(run.fire_next, envs.fire_action, actions)
    envs.send(actions)
    held = None
    if run.heldout is not None:  # one step of the held-out game while the emulators run
        held = heldout_step(run, run.heldout.choose(heldout_greedy, epsilon))
    if not cfg.overlap_env or cfg.suite != "atari":
        step_result = envs.recv()
    # one update per train_every agent steps; on Atari they run while the emulators step
    if st.env_steps >= st.updates_from:
        st.credit += n
    n_updates, st.credit = divmod(st.credit, cfg.train_every)
    if replay.can_sample():
        for _ in range(n_updates):
            update(run, st)
            st.updates += 1
    if cfg.overlap_env and cfg.suite == "atari":
        step_result = envs.recv()
    next_obs, reward, terminated, truncated, next_lives = step_result

    ended = terminated | truncated
    lost = life_lost(run.lives, next_lives) & ~ended & ~run.final_prev
    done = td_done(cfg, terminated, lost)
    reward_stored = np.clip(reward, -1, 1) if cfg.reward_clip else reward
    replay.add_step(actions, reward_stored, done, envs.newest_frame(next_obs), run.final_prev, ended)
    run.ep_return += np.where(run.final_prev, 0.0, reward)
    for i in np.flatnonzero(ended):
        run.episodes.append(float(run.ep_return[i]))
    run.ep_return[ended] = 0.0
    run.fire_next = lost
    run.final_prev, run.lives, run.obs = ended, next_lives, next_obs
    if held is not None:
        held.result()  # the held-out game's step, done beside the update (raises its error)
    st.env_steps += n


def report(run: Run, st: DQNState, clock: tuple[float, int], last: bool) -> None:
    """A row (``report_metrics``) and, at the last, a checkpoint; the running sums folded in and
    zeroed first, so a checkpoint holds none. ``clock``: the time and agent step of the
    previous report."""
    cfg = run.cfg
    elapsed = time.perf_counter() - clock[0]
    metrics = {
        "env/steps": st.env_steps,
        "env/frames": st.env_steps * frames_per_step(cfg),
        "perf/env_steps_per_s": (st.env_steps - clock[1]) / max(elapsed, 1e-9),
        "train/epsilon": epsilon_at(cfg, st.env_steps),
        "train/updates": st.updates,
    }
    metrics |= report_metrics(run, st, last)
    while st.next_report <= st.env_steps:
        st.next_report += cfg.report_every
    for total in run.sums.values():
        total.zero_()
    st.loss_n, st.loss_sum, st.q_sum, st.ess_sum = 0, 0.0, 0.0, 0.0
    st.inner, st.inner_exact, st.episodes = [], [], list(run.episodes)
    session.report(metrics, state=st.state_dict, checkpoint=True if last else None)


def close(run: Run) -> None:
    run.envs.close()
    if run.heldout_thread is not None:
        run.heldout_thread.shutdown()
    if run.eval_envs is not None:
        run.eval_envs.close()


def heldout_step(run: Run, action: int):
    """The held-out game's emulator step with ``action`` (``HeldoutProbe.advance``), in a
    thread of its own where ``HELDOUT_THREAD`` (the training thread goes on to the update);
    a future whose ``result()`` the loop waits for before the game is read again."""
    if not HELDOUT_THREAD:
        run.heldout.advance(action)
        return None
    if run.heldout_thread is None:
        run.heldout_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="heldout")
    return run.heldout_thread.submit(run.heldout.advance, action)


# -------------------------------------------------------------------- the pieces of one trial
def build_run(cfg: Config, device: torch.device) -> Run:
    """Envs, Q-network and its target copy, optimizer, replay and generators (in this order:
    the seeded initialization depends on it)."""
    envs = make_envs(cfg, cfg.num_envs)
    torch.manual_seed(cfg.seed)
    q = q_network(cfg.suite, envs.obs_shape, envs.num_actions, cfg.mlp_hidden, cfg.channels_last).to(device)
    target = copy.deepcopy(q).requires_grad_(False)
    on_device = replay_on_device(cfg, device)
    capture = use_graph(cfg, device, on_device)
    optimizer = make_optimizer(cfg, q.parameters(), capturable=capture)
    q_fwd = compiled(q, cfg.compile, "Q-network")  # eager, with one warning line, if it fails
    target_fwd = compiled(target, cfg.compile, "target network")
    shape = (cfg.buffer_size, cfg.num_envs, envs.frame_shape, envs.frame_dtype, envs.stack)
    replay = DeviceFrameReplay(*shape, device=device) if on_device else FrameReplay(*shape)
    rng = np.random.default_rng(cfg.seed)
    probe_rng = np.random.default_rng([cfg.seed, PROBE_STREAM])
    exact_model = envs.exact_model()
    q_star = optimal_q(*exact_model[:2], cfg.gamma, exact_model[2]) if exact_model else None
    sample_gen, act_gen = (
        torch.Generator(device).manual_seed(derive_seed(cfg.seed, stream)) for stream in (SAMPLE_STREAM, ACT_STREAM)
    )
    return Run(
        cfg,
        device,
        envs,
        q,
        target,
        q_fwd,
        target_fwd,
        optimizer,
        replay,
        rng,
        probe_rng,
        exact_model,
        q_star,
        sample_gen=sample_gen,
        act_gen=act_gen,
        capture=capture,
    )


def replay_on_device(cfg: Config, device: torch.device) -> bool:
    """``replay_on_device``, with auto resolved: on a CUDA device only."""
    return enabled(cfg.replay_on_device, device)


def use_graph(cfg: Config, device: torch.device, on_device: bool) -> bool:
    """``cuda_graph``, with auto resolved: on a CUDA device with the replay there. Asked for on
    another device: one warning line, and the update runs eagerly; on a simulated GPU machine
    (``RAYLAB_SIMULATED_GPUS=1``, the device rehearsal) the capture is simulated
    (cuda_graph.py)."""
    if cfg.cuda_graph == AUTO:
        return device.type == "cuda" and on_device
    if cfg.cuda_graph and device.type != "cuda" and simulated_gpus():
        return True
    if cfg.cuda_graph and device.type != "cuda":
        warn(f"cuda_graph: true on a {device.type} device: there is nothing to capture; the update runs eagerly")
        return False
    return cfg.cuda_graph


def simulated_gpus() -> bool:
    """A simulated GPU machine (raylab.session: its GPUs are labels, the trials train on the CPU)."""
    return os.environ.get("RAYLAB_SIMULATED_GPUS") == "1"


class OptimizerOf:
    """The optimizer as a state field, restored keeping its own ``capturable`` flag
    (``load_optimizer``): a checkpoint of an eager trial resumes under a CUDA graph and the other
    way round."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        load_optimizer(self.optimizer, state)


class ProbeOf:
    """The current period's probe transitions and frozen targets (``run.probe``) as a state
    field: saved on the CPU, restored onto the run's device."""

    def __init__(self, run: Run):
        self.run = run

    def state_dict(self) -> dict | None:
        return {k: v.cpu() if torch.is_tensor(v) else v for k, v in (self.run.probe or {}).items()} or None

    def load_state_dict(self, state: dict | None) -> None:
        device = self.run.device
        self.run.probe = (
            None if state is None else {k: v.to(device) if torch.is_tensor(v) else v for k, v in state.items()}
        )


class EnvsOf:
    """The envs' own state and the loop's view of their episodes (observations, lives, returns,
    the reset flags) as a state field, where the envs can save their state (gymnasium); None
    where they cannot (ALE's emulators), and a resumed trial starts new episodes (``resume``)."""

    def __init__(self, run: Run):
        self.run = run
        self.restored = False

    def state_dict(self) -> dict | None:
        run = self.run
        env_state = run.envs.state()
        if env_state is None:
            return None
        return {
            "env": env_state,
            "obs": torch.from_numpy(run.obs.copy()),
            "lives": torch.from_numpy(run.lives.copy()),
            "ep_return": torch.from_numpy(run.ep_return.copy()),
            "final_prev": torch.from_numpy(run.final_prev.copy()),
            "fire_next": torch.from_numpy(run.fire_next.copy()),
        }

    def load_state_dict(self, state: dict | None) -> None:
        self.restored = state is not None
        if state is None:
            return
        run = self.run
        run.envs.set_state(state["env"])
        run.obs, run.lives = state["obs"].numpy(), state["lives"].numpy()
        run.ep_return = state["ep_return"].numpy().copy()
        run.final_prev, run.fire_next = state["final_prev"].numpy().copy(), state["fire_next"].numpy().copy()


@dataclass
class DQNState(LoopState):
    """What a dqn_softlinf checkpoint holds, each field saved and restored (tensors on the CPU)."""

    q: torch.nn.Module
    target: torch.nn.Module
    optimizer: OptimizerOf
    np_rng: np.random.Generator
    """Exploration and replay sampling (``run.rng``)."""
    probe_rng: np.random.Generator
    sample_gen: torch.Generator
    """The replay on the device: its batches' draws (saved either way, so a checkpoint resumes
    with the replay on the host or on the device)."""
    act_gen: torch.Generator
    """The replay on the device: epsilon-greedy's draws."""
    probe: ProbeOf
    envs: EnvsOf
    replay: FrameReplay | DeviceFrameReplay | None
    """The replay, unless ``checkpoint_replay`` is off (a resumed trial then refills it); both
    replays save the same arrays, so either loads the other's."""
    rng: GlobalRNG = field(default_factory=GlobalRNG)
    # the loop's counters (saved at a report, the running sums just folded in and zeroed)
    env_steps: int = 0
    updates: int = 0
    next_sync: int = 0
    """The agent step of the next target update (from ``learning_starts``)."""
    next_report: int = 0
    next_eval: int = 0
    evals: int = 0
    eval_return: float = math.nan
    """The last evaluation's mean return."""
    updates_from: int = 0
    """The agent step updates start (or start again, after a resume that refills the replay)."""
    episodes: list = field(default_factory=list)
    """The last 100 training games' returns."""
    loss_sum: float = 0.0
    q_sum: float = 0.0
    ess_sum: float = 0.0
    loss_n: int = 0
    """Updates since the last report."""
    inner: list = field(default_factory=list)
    """(regression_linf, progress_ratio) of each inner loop ended since the last report ..."""
    inner_exact: list = field(default_factory=list)
    """... and their exact values (a known model)."""
    exact_start: float | None = None
    """The current target's exact residual (a known model)."""
    credit: int = 0
    """Agent steps not yet paid for with an update (one per ``train_every``)."""
    starts: int = 0
    """How many times the envs started new episodes from a seed block (resumes without env state)."""
    history: dict = field(default_factory=dict)
    """The reported values of ``TIME_AVERAGED`` ..."""
    marks: dict = field(default_factory=dict)
    """... and the frame marks reached."""
    config: dict = saved_only()

    @classmethod
    def of(cls, run: Run, config: dict) -> DQNState:
        cfg = run.cfg
        return cls(
            run.q,
            run.target,
            OptimizerOf(run.optimizer),
            run.rng,
            run.probe_rng,
            run.sample_gen,
            run.act_gen,
            ProbeOf(run),
            EnvsOf(run),
            run.replay if cfg.checkpoint_replay else None,
            next_sync=cfg.learning_starts,
            next_report=cfg.report_every,
            updates_from=cfg.learning_starts,
            config=config,
        )

    def load_state_dict(self, state: dict, device=None) -> None:
        if "counters" in state:  # a checkpoint from before the counters were fields: one dict
            state = {k: v for k, v in state.items() if k != "counters"} | state["counters"]
        super().load_state_dict(state, device)


def resume(run: Run, st: DQNState) -> None:
    """After a checkpoint is loaded into ``st``: refill the replay before learning again where
    it was not saved; where the envs' state was not saved (ALE), start new episodes from a seed
    block of their own."""
    cfg, n = run.cfg, run.cfg.num_envs
    if st.replay is None:  # refill before learning again
        st.updates_from = st.env_steps + cfg.learning_starts
        run.probe = None
        if st.envs.restored:
            run.replay.add_observation(run.envs.newest_frame(run.obs), np.ones(n, bool), run.final_prev)
    if not st.envs.restored:  # ALE emulator state cannot be saved through AtariVectorEnv
        st.starts += 1
        run.obs, run.lives = run.envs.reset(env_seed(cfg.seed, RESUME_STREAM, st.starts))
        run.ep_return = np.zeros(n, np.float64)
        run.final_prev, run.fire_next = np.zeros(n, bool), np.zeros(n, bool)
        run.replay.cut()
        run.replay.add_observation(run.envs.newest_frame(run.obs), first=np.ones(n, bool), final=run.final_prev)


def autocast(run: Run):
    """bf16 for acting and updates only; the probes measure in float32. Autocast's cache of
    cast weights is off with a CUDA graph (torch: caching must be disabled in graphed regions)."""
    return torch.autocast(
        run.device.type, dtype=torch.bfloat16, enabled=run.cfg.amp_bf16, cache_enabled=run.graph is None
    )


def to_batch(run: Run, b: dict) -> dict:
    """A host batch (``FrameReplay.gather``) on the device, in two copies: the contiguous frame
    window of each transition (``obs`` and ``next_obs`` are its slices there) and one float32
    array of (action, reward, done). Pinned and non-blocking on CUDA: a source with gaps (the
    slices themselves) would be pinned with its gaps and copied through a pageable buffer."""
    window, scalars = host_batch(b)
    return device_batch(run, to_device(window, run.device), to_device(scalars, run.device))


def host_batch(b: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The two host tensors ``to_batch`` sends: ``window`` ``(n, k + 1, *frame)`` and
    ``scalars`` ``(3, n)`` float32 (actions are exact in float32 up to 2^24)."""
    scalars = np.stack([b["action"], b["reward"], b["done"]]).astype(np.float32)
    return torch.from_numpy(b["window"]), torch.from_numpy(scalars)


def device_batch(run: Run, window: torch.Tensor, scalars: torch.Tensor) -> dict:
    n, k = len(window), window.shape[1] - 1
    shape = (n, *run.envs.obs_shape)
    return {
        "obs": window[:, :k].reshape(shape),
        "next_obs": window[:, 1:].reshape(shape),
        "action": scalars[0].long(),
        "reward": scalars[1],
        "done": scalars[2],
    }


def device_gather(run: Run, row: torch.Tensor, env: torch.Tensor) -> dict:
    """The transitions at ``(row, env)`` of the replay on the device, shaped as the network
    reads them (``DeviceFrameReplay.gather`` without its window)."""
    b = run.replay.gather(row, env)
    shape = (len(row), *run.envs.obs_shape)
    return {
        "obs": b["obs"].reshape(shape),
        "next_obs": b["next_obs"].reshape(shape),
        "action": b["action"],
        "reward": b["reward"],
        "done": b["done"],
    }


def sample_batch(run: Run) -> dict:
    """The update's batch on the device: drawn and gathered there (replay on the device), or
    drawn with numpy and sent (``to_batch``)."""
    cfg, replay = run.cfg, run.replay
    if isinstance(replay, DeviceFrameReplay):
        return device_gather(run, *replay.sample_index_device(cfg.batch_size, run.sample_gen))
    return to_batch(run, replay.sample(cfg.batch_size, run.rng))


def to_obs(run: Run, obs: np.ndarray) -> torch.Tensor:
    """Observations made on the host (the held-out game's) -> network input (pinned,
    non-blocking on CUDA)."""
    return to_device(torch.from_numpy(obs), run.device)


@torch.inference_mode()
def greedy(run: Run, obs: np.ndarray) -> np.ndarray:
    with autocast(run):
        # the one read per agent step: the emulators need the actions on the host
        return run.q_fwd(to_device(torch.from_numpy(obs), run.device)).argmax(1).cpu().numpy()


def act(run: Run, obs: np.ndarray, epsilon: float, gen: np.random.Generator) -> np.ndarray:
    return epsilon_greedy(run, obs, epsilon, gen)[0]


def epsilon_greedy(
    run: Run, obs: np.ndarray, epsilon: float, gen: np.random.Generator, extra: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Epsilon-greedy actions for ``obs`` drawn with numpy, and the greedy actions for the
    observations ``extra`` from the same forward pass (None when no forward pass was needed:
    every env explores)."""
    explore = gen.random(len(obs)) < epsilon
    actions = gen.integers(0, run.envs.num_actions, size=len(obs))
    if explore.all():
        return actions, None
    if extra is None:
        return np.where(explore, actions, greedy(run, obs)), None
    best = greedy(run, np.concatenate([obs, extra]))
    return np.where(explore, actions, best[: len(obs)]), best[len(obs) :]


@torch.inference_mode()
def epsilon_greedy_on_device(
    run: Run, epsilon: float, extra: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """``epsilon_greedy`` with the observations read from the replay on the device and the
    draws made there (``run.act_gen``): one read of the device, the actions."""
    n, device, gen = run.cfg.num_envs, run.device, run.act_gen
    if epsilon >= 1.0:  # every env explores (and the held-out game too): no forward pass
        torch.rand(n, generator=gen, device=device)  # the same draws as act_on_device makes
        return torch.randint(0, run.envs.num_actions, (n,), generator=gen, device=device).cpu().numpy(), None
    if run.epsilon_dev is None:
        run.epsilon_dev = torch.zeros((), dtype=torch.float32, device=device)
    run.epsilon_dev.fill_(epsilon)  # a kernel argument: nothing copied, nothing read
    chosen = act_on_device(run, run.epsilon_dev, None if extra is None else to_obs(run, extra)).cpu().numpy()
    return chosen[:n], (chosen[n:] if extra is not None else None)  # the read: the actions


def act_on_device(run: Run, epsilon: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
    """The actions of the envs' newest observations in the device ring, epsilon-greedy at the
    device scalar ``epsilon`` (float32) with ``run.act_gen``'s draws, then the greedy actions of
    the observations ``extra`` from the same forward pass: ``(num_envs + len(extra),)`` on the
    device. Nothing here reads the device or depends on its values (a CUDA graph could hold it)."""
    n, device, gen = run.cfg.num_envs, run.device, run.act_gen
    explore = torch.rand(n, generator=gen, device=device) < epsilon
    actions = torch.randint(0, run.envs.num_actions, (n,), generator=gen, device=device)
    x = run.replay.newest_obs().reshape(n, *run.envs.obs_shape)
    if extra is not None:
        x = torch.cat([x, extra])
    with autocast(run):
        best = run.q_fwd(x).argmax(1)
    return torch.cat([torch.where(explore, actions, best[:n]), best[n:]])


def choose_actions(run: Run, epsilon: float):
    """The training envs' actions at ``epsilon`` and the held-out game's greedy policy (a
    function of its observation, as ``HeldoutProbe.step`` takes it), computed in the same
    forward pass where one runs."""
    extra = run.heldout.obs[None] if run.heldout is not None else None
    if isinstance(run.replay, DeviceFrameReplay):
        actions, extra_greedy = epsilon_greedy_on_device(run, epsilon, extra)
    else:
        actions, extra_greedy = epsilon_greedy(run, run.obs, epsilon, run.rng, extra)

    def heldout_greedy(obs: np.ndarray) -> np.ndarray:
        return extra_greedy if extra_greedy is not None else greedy(run, obs)

    return actions, heldout_greedy


def targets(cfg: Config, net_next: torch.Tensor, target_next: torch.Tensor, b: dict) -> torch.Tensor:
    if cfg.double_dqn:
        next_q = target_next.gather(1, net_next.argmax(1, keepdim=True)).squeeze(1)
    else:
        next_q = target_next.max(1).values
    return b["reward"] + cfg.gamma * (1.0 - b["done"]) * next_q


def update_graph(run: Run) -> GraphedStep:
    """The update (``sample_batch`` and ``learn``) as a CUDA graph, captured at its 4th call
    after 3 eager ones, drawing its batches with ``run.sample_gen``; captured again after the
    optimizer's ``load_state_dict`` or a change of learning rate or batch size (``reset``)."""
    return GraphedStep(
        lambda: learn(run, sample_batch(run)),
        (run.sample_gen,),
        name="DQN update",
        optimizers=(run.optimizer,),
        signature=lambda: (tuple(g["lr"] for g in run.optimizer.param_groups), run.cfg.batch_size),
        simulated=run.device.type != "cuda",
    )


def update(run: Run, s: DQNState) -> None:
    """One gradient step on a uniformly sampled replay batch; the running sums stay on the device."""
    if run.graph is not None:
        run.graph()  # sample_batch and learn, captured as one CUDA graph
    else:
        learn(run, sample_batch(run))
    s.loss_n += 1


def learn(run: Run, b: dict) -> None:
    """The gradient step on the batch ``b``, written so that it can be captured as a CUDA graph
    (cuda_graph.py): no read of the device, tensors updated in place."""
    cfg, sums = run.cfg, run.sums
    with torch.no_grad(), autocast(run):
        target_next = run.target_fwd(b["next_obs"]).float()
        net_next = run.q_fwd(b["next_obs"]).float() if cfg.double_dqn else None
    y = targets(cfg, net_next, target_next, b)
    with autocast(run):
        q_all = run.q_fwd(b["obs"])
        q_sa = q_all.float().gather(1, b["action"][:, None]).squeeze(1)
    run.compute_dtype = q_all.dtype  # metadata (set at the eager calls and the capture): no read
    td = q_sa - y
    loss = batch_loss(cfg, td)
    if cfg.loss == "soft_linf":  # how many samples carry the update: 1 / sum p_i^2
        with torch.no_grad():
            sums["ess"] += effective_sample_size(soft_linf_weights(td, effective_beta(td, cfg.beta, cfg.beta_scale)))
    run.optimizer.zero_grad(set_to_none=True)  # in a CUDA graph: backward makes them in its memory
    loss.backward()
    if cfg.max_grad_norm:
        torch.nn.utils.clip_grad_norm_(run.q.parameters(), cfg.max_grad_norm)
    run.optimizer.step()
    sums["loss"] += loss.detach() / (len(td) if cfg.loss_reduction == "sum" else 1)
    sums["q"] += q_sa.detach().mean()


@torch.no_grad()
def forward_chunks(net, x: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    return torch.cat([net(x[i : i + chunk]) for i in range(0, len(x), chunk)])


def draw_probe(run: Run) -> dict | None:
    replay = run.replay
    if not run.cfg.probe_size or not replay.can_sample():
        return None
    if isinstance(replay, DeviceFrameReplay):  # the same draw as on the host, gathered there
        b = device_gather(run, *replay.sample_index(run.cfg.probe_size, run.probe_rng))
    else:
        b = to_batch(run, replay.sample(run.cfg.probe_size, run.probe_rng))
    b["y"] = targets(
        run.cfg,
        forward_chunks(run.q_fwd, b["next_obs"]) if run.cfg.double_dqn else None,
        forward_chunks(run.target_fwd, b["next_obs"]),
        b,
    )
    return b


def q_taken(run: Run, p: dict) -> torch.Tensor:
    return forward_chunks(run.q_fwd, p["obs"]).gather(1, p["action"][:, None]).squeeze(1)


def bellman_residual(run: Run, p: dict) -> torch.Tensor:
    """|Q(s,a) - (r + gamma max_a' Q(s',a'))| with the current network on both sides."""
    y = p["reward"] + run.cfg.gamma * (1.0 - p["done"]) * forward_chunks(run.q_fwd, p["next_obs"]).max(1).values
    return (q_taken(run, p) - y).abs()


def q_on_all_states(run: Run, net) -> np.ndarray:
    """Exact model only: Q(s, .) for every state."""
    x = torch.from_numpy(run.envs.exact_observations()).to(run.device)
    return forward_chunks(net, x).double().cpu().numpy()


def target_update(run: Run, s: DQNState) -> None:
    """End the inner loop just run (its probe figures), copy Q into the target, draw the next
    period's probe."""
    cfg, probe = run.cfg, run.probe
    if probe is not None and "start_linf" in probe:  # end of the inner loop just run
        end = (q_taken(run, probe) - probe["y"]).abs().max().item()
        s.inner.append((end, end / max(probe["start_linf"], 1e-12)))
    if run.exact_model is not None:  # the same, exactly: max |Q - T Q_target| over all (s, a)
        P, R, cont = run.exact_model
        if s.exact_start is not None:
            t_target = bellman_operator(q_on_all_states(run, run.target_fwd), P, R, cfg.gamma, cont)
            end = float(np.abs(q_on_all_states(run, run.q_fwd) - t_target).max())
            s.inner_exact.append((end, end / max(s.exact_start, 1e-12)))
        q_now = q_on_all_states(run, run.q_fwd)  # the next target: its own exact residual
        s.exact_start = float(np.abs(q_now - bellman_operator(q_now, P, R, cfg.gamma, cont)).max())
    run.target.load_state_dict(run.q.state_dict())
    run.probe = probe = draw_probe(run)
    if probe is not None:  # start of the next inner loop: here Q = Q_target
        probe["start_linf"] = (q_taken(run, probe) - probe["y"]).abs().max().item()


def evaluate(run: Run, s: DQNState) -> float:
    """Mean unclipped return of ``eval_episodes`` episodes, one per env, run in parallel."""
    cfg = run.cfg
    if run.eval_envs is None:
        run.eval_envs = make_envs(cfg, cfg.eval_episodes)
    gen = np.random.default_rng([cfg.seed, EVAL_STREAM, s.evals])
    choose = eval_chooser(run, gen)
    returns, _ = play_games(cfg, run.eval_envs, choose, env_seed(cfg.seed, EVAL_STREAM, s.evals))
    return float(returns.mean())


def eval_chooser(run: Run, gen: np.random.Generator):
    """Evaluation's ``choose(obs) -> actions`` at ``eval_epsilon`` with ``gen``'s draws: acting
    through the device path where training does (the replay on the device; evaluation.py), else
    on the host (``act``). The same actions either way."""
    cfg = run.cfg
    if isinstance(run.replay, DeviceFrameReplay):
        return DeviceEvalActor(
            run.q_fwd, run.envs.num_actions, cfg.eval_epsilon, gen, run.device, lambda: autocast(run)
        )
    return lambda o: act(run, o, cfg.eval_epsilon, gen)


def report_metrics(run: Run, s: DQNState, last: bool) -> dict:
    """A report's training, probe and (when due) evaluation figures: the one place the loop
    reads the device."""
    cfg, sums, metrics = run.cfg, run.sums, {}
    if s.loss_n:
        metrics["train/loss"] = (sums["loss"] / s.loss_n).item()
        metrics["train/q_mean"] = (sums["q"] / s.loss_n).item()
        if cfg.loss == "soft_linf":
            metrics["train/soft_linf_ess"] = (sums["ess"] / s.loss_n).item()
    if run.episodes:
        metrics["episode/return_mean"] = float(np.mean(run.episodes))
        metrics["episode/count_recent"] = len(run.episodes)
    probe_clock = time.perf_counter()
    if run.probe is None:
        run.probe = draw_probe(run)
    if run.probe is not None:
        res = bellman_residual(run, run.probe)
        metrics["bellman/residual_linf_insample"] = res.max().item()
        metrics["bellman/residual_p99_insample"] = torch.quantile(res, 0.99).item()
        metrics["bellman/residual_l2_insample"] = res.square().mean().sqrt().item()
    if run.heldout is not None:
        metrics |= run.heldout.metrics(lambda x: forward_chunks(run.q_fwd, x), cfg.gamma, run.device)
    if run.shared is not None:
        metrics |= run.shared.metrics(lambda x: forward_chunks(run.q_fwd, x), cfg.gamma, run.device)
    if run.exact_model is not None:
        metrics |= exact_metrics(
            q_on_all_states(run, run.q_fwd), *run.exact_model[:2], cfg.gamma, run.exact_model[2], run.q_star
        )
    metrics["perf/probe_s"] = time.perf_counter() - probe_clock
    # 1 when the update replays a captured graph (simulated where there is no CUDA)
    metrics["perf/cuda_graph"] = float(run.graph is not None and run.graph.replaying)
    if run.compute_dtype is not None:  # 1 when the update's forward ran in bfloat16 (amp_bf16)
        metrics["perf/autocast_bf16"] = float(run.compute_dtype == torch.bfloat16)
    if s.inner_exact:
        metrics["inner/regression_linf_exact"] = float(np.mean([e for e, _ in s.inner_exact]))
        metrics["inner/progress_ratio_exact"] = float(np.mean([r for _, r in s.inner_exact]))
    if s.inner:
        metrics["inner/regression_linf"] = float(np.mean([e for e, _ in s.inner]))
        metrics["inner/progress_ratio"] = float(np.mean([r for _, r in s.inner]))
    if s.env_steps >= s.next_eval or last:
        s.eval_return = evaluate(run, s)
        s.evals += 1
        s.next_eval = s.env_steps + cfg.eval_every
    metrics["eval/return_mean"] = s.eval_return
    for key in TIME_AVERAGED:  # robust to when training stops: the mean over the last half of the reports
        if key in metrics:
            s.history.setdefault(key, []).append(float(metrics[key]))
            metrics[time_averaged_name(key)] = time_average(s.history[key])
    for mark in cfg.frame_marks:  # Machado et al.: the last 100 training games' mean at a frame budget
        name = frame_mark_metric(mark)
        if name not in s.marks and s.env_steps * frames_per_step(cfg) >= mark:
            s.marks[name] = metrics.get("episode/return_mean", math.nan)
    return metrics | s.marks


def make_optimizer(cfg: Config, params, capturable: bool = False) -> torch.optim.Optimizer:
    """Adam (CleanRL) or RMSProp with epsilon inside the root (Nature; optim.py), as the config
    says. ``capturable``: Adam's step count on the device, as a CUDA graph needs (CenteredRMSprop
    only updates its state in place: capturable as it is)."""
    if cfg.optimizer == "rmsprop":
        return CenteredRMSprop(
            params, lr=cfg.lr, alpha=cfg.rmsprop_alpha, eps=cfg.rmsprop_eps, centered=cfg.rmsprop_centered
        )
    # fused: one kernel for the whole step, on CPU too (1 ms against 5 ms for foreach here)
    return torch.optim.Adam(params, lr=cfg.lr, eps=cfg.adam_eps, fused=True, capturable=capturable)


def load_optimizer(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """``optimizer.load_state_dict(state)``, keeping this optimizer's ``capturable``: a
    checkpoint of an eager trial resumes under a CUDA graph and the other way round (fused
    Adam keeps its step count on the parameters' device either way)."""
    flags = [group.get("capturable") for group in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, flag in zip(optimizer.param_groups, flags):
        if flag is not None:
            group["capturable"] = flag


def batch_loss(cfg: Config, td: torch.Tensor) -> torch.Tensor:
    """The loss the update minimizes on a batch of TD errors ``td`` (shape ``(B,)``):
    ``L = surrogate(td)`` (loss.py) with ``loss_reduction: mean``, ``L = B surrogate(td)`` with
    ``sum`` (for mse, huber and l1: ``sum_i loss(td_i)``, the batch gradient Nature's Lua DQN
    takes)."""
    loss = surrogate(cfg.loss, td, beta=cfg.beta, beta_scale=cfg.beta_scale, huber_delta=cfg.huber_delta)
    return loss * len(td) if cfg.loss_reduction == "sum" else loss


def epsilon_at(cfg: Config, step: int) -> float:
    """Exploration epsilon after ``step`` agent steps: ``epsilon_start`` until ``h =
    epsilon_decay_start``, then linear to ``epsilon_end`` over ``n = epsilon_fraction *
    total_steps`` steps: ``eps(t) = start + min(1, max(0, t - h) / n) (end - start)``
    (Nature's Lua DQN: ``ep_end + max(0, (ep_start - ep_end) (ep_endt - max(0, t - learn_start)) / ep_endt)``)."""
    frac = min(1.0, max(0, step - cfg.epsilon_decay_start) / (cfg.epsilon_fraction * cfg.total_steps))
    return cfg.epsilon_start + frac * (cfg.epsilon_end - cfg.epsilon_start)


def td_done(cfg: Config, terminated: np.ndarray, lost: np.ndarray) -> np.ndarray:
    """Where the TD target stops bootstrapping: game over, or a lost life with ``episodic_life``."""
    return terminated | (lost & cfg.episodic_life)


def play_games(cfg: Config, envs, choose, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One game per env of ``envs`` (reset with ``seed``), actions from ``choose(obs)``, FIRE
    after a lost life (``0 < lives' < lives``, the game going on) in games that need it, as in
    training; cut off after ``eval_max_steps`` agent steps. Returns each game's unclipped
    return and its length in agent steps."""
    o, lv = envs.reset(seed)
    returns, lengths = np.zeros(envs.num_envs), np.zeros(envs.num_envs, np.int64)
    finished = np.zeros(envs.num_envs, bool)
    fire = np.zeros(envs.num_envs, bool)
    for _ in range(cfg.eval_max_steps):
        a = choose(o)
        if envs.fire_action is not None:
            a = np.where(fire, envs.fire_action, a)
        envs.send(a)
        o, r, term, trunc, lv2 = envs.recv()
        returns += np.where(finished, 0.0, r)
        lengths += ~finished
        fire = life_lost(lv, lv2) & ~(term | trunc)
        lv = lv2
        finished |= term | trunc
        if finished.all():
            break
    return returns, lengths
