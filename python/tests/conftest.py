"""Shared fixtures: the repository root, and the release CLI binary that the equality tests
compare against (built by `cargo test --workspace --release` or `cargo build --release`;
TENSORFORGE_BIN overrides). A missing binary fails those tests: nothing is skipped."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def root() -> pathlib.Path:
    return ROOT


@pytest.fixture(scope="session")
def cli(root):
    exe = os.environ.get("TENSORFORGE_BIN") or str(root / "target" / "release" / "tensorforge")
    if not os.path.exists(exe):
        pytest.fail(
            f"the CLI binary {exe} is missing: build it with `cargo build --release` "
            "(or set TENSORFORGE_BIN)"
        )

    def run(*args, check=True):
        p = subprocess.run([exe, *map(str, args)], capture_output=True, text=True)
        if check and p.returncode != 0:
            raise AssertionError(f"tensorforge {' '.join(map(str, args))}: {p.stderr}")
        return p

    return run
