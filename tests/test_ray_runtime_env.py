"""docs/verl.md's and docs/cluster.md's `runtime_env` on a fresh node (make test-ray): a
Ray whose Python has Ray, torch and numpy but not lmpo. A task there cannot import lmpo;
with `runtime_env={"pip": [the wheel make wheel builds]}` it imports it from the
environment Ray builds, and computes a loss equal to this process's.

The node's Python is a virtual environment that sees this environment's packages through
a site directory of links to them, less lmpo's (its editable hook and its metadata), so
nothing is downloaded: pip finds torch and numpy there and installs the wheel alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray not installed: run `make test-ray`")

ROOT = Path(__file__).resolve().parents[1]
LMPO_ENTRIES = ("lmpo-", "__editable__.lmpo", "__editable___lmpo")

LOSS = """
def cegppo_loss():
    import torch
    from lmpo.losses import aggregate, get_loss

    torch.manual_seed(0)
    logp = -torch.rand(4, 16, dtype=torch.float64)
    old_logp = logp + 0.05 * torch.randn(4, 16, dtype=torch.float64)
    adv, mask = torch.randn(4, 1, dtype=torch.float64).expand(4, 16), torch.ones(4, 16)
    loss_tok, _ = get_loss("cegppo", beta1=0.5, beta2=1.0)(logp, old_logp, adv, mask)
    return float(aggregate(loss_tok, mask, "token-mean"))
"""

DRIVER = LOSS + """
import json, sys
import ray

ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)

@ray.remote
def in_task():
    try:
        import lmpo
    except ImportError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"file": lmpo.__file__, "loss": cegppo_loss()}

bare = ray.get(in_task.remote())
wheel = ray.get(in_task.options(runtime_env={"pip": [sys.argv[1]]}).remote())
print(json.dumps({"bare": bare, "wheel": wheel}))
"""


def node_python(tmp: Path) -> Path:
    """A Python with this environment's packages but lmpo's (module docstring)."""
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    farm = tmp / "site"
    farm.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith(LMPO_ENTRIES):
            (farm / entry.name).symlink_to(entry)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp / "node"], check=True)
    python = tmp / "node" / "bin" / "python"
    own_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True, check=True)
    Path(own_site.stdout.strip(), "packages.pth").write_text(
        f"import site; site.addsitedir({str(farm)!r})\n")
    return python


def test_a_node_without_lmpo_installs_it_from_the_wheel_in_a_runtime_env(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", tmp_path / "dist", ROOT], check=True)
    wheel = next((tmp_path / "dist").glob("lmpo-*.whl"))
    python = node_python(tmp_path)
    bare = subprocess.run([python, "-c", "import lmpo"], capture_output=True, text=True)
    assert bare.returncode == 1 and "No module named 'lmpo'" in bare.stderr
    (tmp_path / "driver.py").write_text(DRIVER)
    got = subprocess.run([python, tmp_path / "driver.py", wheel], capture_output=True,
                         text=True, cwd=tmp_path, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    result = json.loads(got.stdout.strip().splitlines()[-1])
    assert result["bare"] == {"error": "ModuleNotFoundError: No module named 'lmpo'"}
    assert "runtime_resources" in result["wheel"]["file"], result  # Ray's environment's
    assert not result["wheel"]["file"].startswith(str(ROOT))
    here: dict = {}
    exec(LOSS, here)  # the same computation in this process, from the clone
    assert result["wheel"]["loss"] == here["cegppo_loss"]()
