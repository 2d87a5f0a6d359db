"""Which storage variables a joined cluster's trials get through the job's runtime_env."""

from raylab.launch.ray_start import credential_env


def test_only_set_storage_variables_and_only_for_a_uri():
    env = {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_SESSION_TOKEN": "",
        "AWS_ENDPOINT_URL_S3": "http://10.0.0.5:9000",
        "HOME": "/root",
        "AWS_PROFILE": "lab",
    }
    assert credential_env("s3://b/runs", env) == {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_ENDPOINT_URL_S3": "http://10.0.0.5:9000",
    }
    assert credential_env("/shared/results", env) == {}
