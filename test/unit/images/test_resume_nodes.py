"""Slurm's ResumeProgram (images/scripts/resume-nodes): one merge patch of the cluster's power ConfigMap with the
nodes and the time, the token given to curl on its stdin (never in its arguments), within a deadline; nothing sent
for what is not a hostlist; a pod without the token (no elastic group, an older pod) leaves it to the operator's
poll."""

from __future__ import annotations

import json
from pathlib import Path

from test.unit.images.conftest import run_script, write_exe

# The kubernetes Service address a pod sees; the fake curl only records it, nothing connects.
URL = "https://10.96.0.1:443/api/v1/namespaces/hpc/configmaps/c-power"
# A curl that records its arguments (one a line) and its stdin (the -K config).
FAKE_CURL = """#!/bin/bash
printf '%s\\n' "$@" >"$RECORD/args"
cat >"$RECORD/config"
"""


def setup(tmp_path: Path, *, token: bool = True) -> dict[str, str]:
    bin_dir, tokens, record = tmp_path / "bin", tmp_path / "token", tmp_path / "record"
    write_exe(bin_dir / "curl", FAKE_CURL)
    record.mkdir()
    tokens.mkdir()
    if token:
        (tokens / "token").write_text("secret-token")
        (tokens / "ca.crt").write_text("CA")
    url = tmp_path / "power-url"
    url.write_text(URL + "\n")
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "RECORD": str(record),
        "TOKEN_DIR": str(tokens),
        "POWER_URL_FILE": str(url),
    }


def test_it_patches_the_power_configmap_with_the_nodes_and_keeps_the_token_off_the_command_line(
    tmp_path: Path,
) -> None:
    env = setup(tmp_path)
    done = run_script("resume-nodes", "c-worker-cpu-[0-1],c-worker-gpu-3", env=env)
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "record" / "args").read_text().splitlines()
    assert args[-1] == URL
    assert args[args.index("-X") + 1] == "PATCH"
    assert "Content-Type: application/merge-patch+json" in args
    assert args[args.index("--max-time") + 1] == "5", "a deadline"
    assert args[args.index("--cacert") + 1] == f"{env['TOKEN_DIR']}/ca.crt"
    body = json.loads(args[args.index("--data-binary") + 1])
    assert body["data"]["nodes"] == "c-worker-cpu-[0-1],c-worker-gpu-3"
    assert body["data"]["at"].endswith("Z") and set(body["data"]) == {"nodes", "at"}
    assert not [a for a in args if "secret-token" in a], "the token is not in curl's arguments"
    config = (tmp_path / "record" / "config").read_text()
    assert config == 'header = "Authorization: Bearer secret-token"\n'


def test_what_is_not_a_hostlist_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    env = setup(tmp_path)
    done = run_script("resume-nodes", 'x","evil":"1', env=env)
    assert done.returncode == 2 and "not a hostlist" in done.stderr
    assert not (tmp_path / "record" / "args").exists()


def test_without_the_token_nothing_is_sent_and_slurm_sees_success(tmp_path: Path) -> None:
    env = setup(tmp_path, token=False)
    done = run_script("resume-nodes", "c-worker-cpu-0", env=env)
    assert done.returncode == 0
    assert "the operator's poll resumes c-worker-cpu-0" in done.stderr
    assert not (tmp_path / "record" / "args").exists()
