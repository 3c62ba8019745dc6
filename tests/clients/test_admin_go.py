"""Issue 11 with franz-go's admin client (kadm): tests/clients/go/admin, built with `go build`
and run against the cluster admin_target.py picks (ADMIN_TEST_TARGET=vdl|kafka). The program
prints a line per check and exits non-zero at the first failure; this test shows its output.

Needs Go >= 1.26 (franz-go v1.22.3's go.mod asks for it): `go` on PATH or /usr/local/go/bin/go.
Debian's golang-go (1.19 on bookworm) is too old, so scripts/test-deps.sh installs none; it
prefetches the module's dependencies when Go is there.
"""

import os
import shutil
import subprocess

import pytest

import admin_target as at

pytestmark = pytest.mark.timeout(420)

MODULE = os.path.join(at.REPO, "tests", "clients", "go", "admin")


def go_binary():
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None
    )
    if go is None:
        pytest.fail("no Go toolchain (go on PATH or /usr/local/go/bin/go); Go >= 1.26 is needed")
    return go


@pytest.fixture(scope="module")
def admin_program(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("go-admin") / "admin")
    r = subprocess.run(
        [go_binary(), "build", "-mod=readonly", "-o", out, "."],
        cwd=MODULE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, f"go build failed:\n{r.stdout}\n{r.stderr}"
    return out


def test_kadm_admin_checks(admin_program, admin_target):
    r = subprocess.run(
        [
            admin_program,
            "-bootstrap",
            admin_target.bootstrap,
            "-target",
            admin_target.kind,
            "-timeout",
            "150s",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    print(r.stdout)
    lines = r.stdout.splitlines()
    assert r.returncode == 0, f"kadm checks failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert lines and lines[-1] == "all checks passed", r.stdout
    assert not [line for line in lines if line.startswith("FAIL")], r.stdout
