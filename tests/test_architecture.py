"""The architecture, checked: layers import only downward and never in a cycle, the
experiment harness's wings import one way, the training loop names no method, no function
in `trainer/` or `experiments/` is over 60 lines, and nothing cites a document outside the
repository."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from lmpo import presets
from lmpo.advantages import list_advantages
from lmpo.losses import list_losses, loss_meta
from lmpo.rollout import CONTROLLERS, list_controllers

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "lmpo"

# Every top-level module or package of lmpo, lowest first: a module may import only
# those before it (and itself). Data flows down, nothing flows back up.
LAYERS = ["__init__", "errors", "atomic", "processes", "process_env", "yamlfile", "extras",
          "progress",
          "domains",
          "choices", "devices", "registry", "masked", "logprobs", "welford",
          "faults", "locks", "user_modules", "reward_worker", "cache", "eval_cache", "presets",
          "config",
          "models", "tasks",
          "rollout", "rewards", "advantages", "losses", "legacy", "evaluate", "sft", "warmstart",
          "reward_model_training", "trainer", "options", "methods", "method_detail", "experiments",
          "integrations",
          "starter", "cli_eval", "cli_experiments", "cli",
          "__main__"]


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """Every lmpo module `path` imports, at module level or inside a function."""
    out = set()
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else \
        module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "lmpo"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            if base.split(".")[0] != "lmpo":
                continue
            for a in node.names:  # `from lmpo import presets` imports a module
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return {m for m in out if m in MODULES}


GRAPH = {m: imports(p) - {m} for m, p in MODULES.items()}


def layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return LAYERS.index(top)


def test_every_module_has_a_layer():
    tops = {m.split(".")[1] if "." in m else "__init__" for m in MODULES}
    assert tops <= set(LAYERS), tops - set(LAYERS)


def test_no_import_goes_up_a_layer():
    upward = sorted(f"{a} -> {b}" for a, deps in GRAPH.items() for b in deps
                    if layer(b) > layer(a))
    assert not upward, upward


# The experiment harness's wings, lowest first: a wing imports only itself and the wings
# before it. The package's face (`__init__`) and the public paths kept for users
# (`spec`, `results`) sit above every wing, and no lmpo module imports them.
WINGS = ["stats", "design", "engines", "report", "run"]
FACES = {"lmpo.experiments", "lmpo.experiments.spec", "lmpo.experiments.results"}


def wing(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["lmpo", "experiments"] or len(parts) < 3 or parts[2] not in WINGS:
        return None
    return WINGS.index(parts[2])


def test_every_experiments_module_is_in_a_wing_or_a_face():
    loose = sorted(m for m in MODULES if m.startswith("lmpo.experiments")
                   and wing(m) is None and m not in FACES)
    assert not loose, loose


def test_the_experiment_wings_import_one_way():
    upward = sorted(f"{a} -> {b}" for a, deps in GRAPH.items() for b in deps
                    if wing(a) is not None and wing(b) is not None and wing(b) > wing(a))
    assert not upward, upward
    faces = sorted(f"{a} -> {b}" for a, deps in GRAPH.items() for b in deps
                   if b in FACES - {"lmpo.experiments"} and a not in FACES)
    assert not faces, faces
    assert wing("lmpo.experiments.run.sweep") > wing("lmpo.experiments.report.write") > \
        wing("lmpo.experiments.engines.verl_launch") > wing("lmpo.experiments.design.spec") > \
        wing("lmpo.experiments.stats.labels")


def test_the_public_paths_are_their_wings_modules():
    import lmpo.experiments.design.spec
    import lmpo.experiments.report.results
    import lmpo.experiments.results
    import lmpo.experiments.spec

    assert lmpo.experiments.spec is lmpo.experiments.design.spec
    assert lmpo.experiments.results.main is lmpo.experiments.report.results.main
    from lmpo.experiments.spec import load_experiment

    assert load_experiment is lmpo.experiments.design.spec.load_experiment


def test_the_results_generator_runs_at_its_public_path(monkeypatch):
    """`python -m lmpo.experiments.results --check`, run as `-m` runs it (in this process:
    a fresh interpreter spends ~10 s importing lmpo)."""
    import runpy
    import sys

    monkeypatch.setattr(sys, "argv", ["results", str(ROOT), "--check"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("lmpo.experiments.results", run_name="__main__")
    assert done.value.code == 0


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_among_modules():
    # a package's __init__ re-exporting its own modules is not a cycle of the layers
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in GRAPH.items()}
    assert find_cycle(graph) is None, find_cycle(graph)


def test_the_checks_would_catch_a_cycle_and_an_upward_edge():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert layer("lmpo.rollout.sampler") < layer("lmpo.trainer.loop")
    assert "lmpo.trainer" not in str(GRAPH["lmpo.models.convert"])


# ---------------------------------------------------------------- the loop names no method
TRAINER = sorted((SRC / "trainer").glob("*.py"))


def method_words() -> set[str]:
    """Names of every registered part and method preset, and the metric prefixes the
    parts declare (espo/, or/, ...)."""
    bases = {"base", "base_ac", "base_long", "base_real", "real-demo", "demo"}
    words = set(list_losses()) | set(list_advantages()) | set(list_controllers())
    words |= set(presets.names("train")) - bases
    words.discard("none")  # the absence of a controller, and an English word
    return words


def metric_prefixes() -> set[str]:
    keys = [k for n in list_losses() for k in loss_meta(n)["diagnostics"]]
    keys += [k for n in list_controllers() for k in CONTROLLERS.meta(n)["diagnostics"]]
    prefixes = set()
    for key in keys:
        parts = key.split("/")
        if len(parts) > 2 or parts[0] not in ("loss", "diag", "grad", "adv", "policy"):
            prefixes.add((parts[1] if parts[0] == "loss" else parts[0]) + "/")
    return prefixes


@pytest.mark.parametrize("path", TRAINER, ids=lambda p: p.name)
def test_trainer_names_no_method(path):
    text = path.read_text()
    hits = sorted({w for w in method_words()
                   if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text, re.IGNORECASE)})
    hits += sorted({p for p in metric_prefixes() if re.search(rf"\b{re.escape(p)}", text)})
    assert not hits, f"{path.name} names {hits}"


def test_the_name_check_knows_the_methods():
    assert {"espo", "cegppo", "output_reset", "gae", "dapo"} <= method_words()
    assert {"espo/", "or/", "dppo/", "drpo/"} <= metric_prefixes()


@pytest.mark.parametrize("path", TRAINER + sorted((SRC / "experiments").rglob("*.py")),
                         ids=lambda p: p.relative_to(SRC).as_posix())
def test_no_function_in_the_trainer_or_the_experiment_harness_is_over_60_lines(path):
    tree = ast.parse(path.read_text())
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            and n.end_lineno - n.lineno + 1 > 60]
    assert not long, long


# ---------------------------------------------------------------- self-contained
def test_nothing_cites_a_document_outside_the_repository():
    files = [*SRC.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *ROOT.glob("*.md"),
             *(ROOT / "docs").rglob("*.md"), *(ROOT / "benchmarks").rglob("*.py"),
             *(ROOT / "experiments").glob("*.yaml"), *(ROOT / "experiments").rglob("*.py"),
             *(SRC / "presets").rglob("*.yaml")]
    pattern = re.compile(r"methods\.md|recipes\.md|api\.md|design\.md|\.\./shared|spec/")
    this = Path(__file__).resolve()
    cited = [f"{p.relative_to(ROOT)}:{i}" for p in files if p.resolve() != this
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not cited, cited


@pytest.mark.parametrize("module,function", [("rollout/sampler.py", "sample"),
                                             ("trainer/validate.py", "validate")])
def test_sampling_and_validation_read_in_one_scroll(module, function):
    tree = ast.parse((SRC / module).read_text())
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    assert node.end_lineno - node.lineno + 1 <= 60


@pytest.mark.parametrize("folder", ["benchmarks", "experiments"])
def test_the_scripts_import_each_other_without_a_cycle(folder):
    """benchmarks/ and experiments/ scripts import their siblings by bare name (`from common
    import ...`): no cycle among them, function-level imports included."""
    scripts = {p.stem: p for p in (ROOT / folder).glob("*.py")}
    graph = {}
    for name, path in scripts.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                deps.add(node.module.split(".")[0])
        graph[name] = deps & set(scripts) - {name}

    def reach(start, seen=()):
        for nxt in graph[start]:
            if nxt in seen:
                continue
            yield nxt
            yield from reach(nxt, (*seen, nxt))

    cycles = sorted(m for m in graph if m in set(reach(m)))
    assert not cycles, {m: sorted(graph[m]) for m in cycles}


FORWARD = SRC / "models" / "forward.py"


def test_every_forward_pass_over_the_policy_or_critic_lives_in_models_forward():
    """No module outside `lmpo.models` calls a model with `input_ids=` except through
    `lmpo.models.forward`'s functions (the reward model's own trunk pass aside: it is
    neither the policy nor the critic), and the pass functions are defined there alone."""
    passes = {"cached_forward", "forward_logprobs", "response_logprobs", "critic_values",
              "shared_prefix_logits", "sft_loss", "IncrementalValues"}
    outside, defined = [], []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in passes \
                    and path != FORWARD:
                defined.append(f"{rel}: {node.name}")
            if rel.startswith("models/") or rel == "rewards/reward_model.py":
                continue
            if isinstance(node, ast.Call) and any(k.arg == "input_ids" for k in node.keywords):
                name = node.func.id if isinstance(node.func, ast.Name) else \
                    getattr(node.func, "attr", "")
                if name not in passes:
                    outside.append(f"{rel}:{node.lineno}")
    assert not defined, defined
    assert not outside, outside


def test_the_update_loop_reads_no_cross_cutting_setting():
    """A cross-cutting feature is a term or a mask of `trainer/objective.py`, never a
    branch in the update: `trainer/update.py` reads no `cfg.loss.*` beyond name, hparams
    and agg, and no KL, critic or entropy setting."""
    tree = ast.parse((SRC / "trainer" / "update.py").read_text())
    read = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "cfg":
            read.add(f"{node.value.attr}.{node.attr}")
    allowed_loss = {"loss.name", "loss.hparams", "loss.agg"}
    bad = sorted(k for k in read if (k.startswith("loss.") and k not in allowed_loss)
                 or k.startswith(("kl.", "critic.")) or k == "optim.entropy_coef")
    assert not bad, bad
    assert read, "the scan found no cfg reads at all: it is not reading update.py"


def test_the_trainers_middle_has_one_run_object_and_a_plain_config():
    """train_step takes the step and the open run; the config module imports no part
    module (the trainer builds the parts: lmpo.trainer.parts); no function in trainer/
    imports from lmpo (every dependency is in the module's header)."""
    import inspect

    from lmpo.trainer.loop import train_step

    assert list(inspect.signature(train_step).parameters) == ["step", "run"]
    config_imports = imports(SRC / "trainer" / "train_config.py")
    parts = {m for m in config_imports if m.split(".")[1] in ("losses", "advantages", "rollout",
                                                              "rewards")}
    assert not parts, parts
    hidden = []
    for path in (SRC / "trainer").glob("*.py"):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                hidden += [f"{path.name}:{n.lineno}" for n in ast.walk(fn)
                           if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("lmpo")]
    assert not hidden, hidden


def test_a_run_is_opened_on_a_resolved_policy():
    """The warm start is built (or found) before a run directory is opened: `open_run`
    takes the resolved policy folder, and the run-setup module imports nothing from the
    warm-start builder, whose work would otherwise run under the run's lock."""
    import inspect

    from lmpo.trainer.setup import open_run

    assert list(inspect.signature(open_run).parameters)[:3] == ["cfg", "run_dir", "policy_dir"]
    assert not {m for m in imports(SRC / "trainer" / "setup.py")
                if m in ("lmpo.warmstart", "lmpo.sft", "lmpo.models.convert")}


def test_architecture_md_names_every_part_kind_and_metadata_field():
    """docs/architecture.md's parts table stays current: every registry lmpo.methods lists
    (and the post-update diagnostics) and every metadata field a part declares."""
    from lmpo.methods import registries

    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = []
    for kind, reg in registries().items():
        if reg.kind not in text:
            missing.append(f"kind {reg.kind}")
        for field in reg.defaults:
            if field not in ("title", "source", "summary") and f"`{field}`" not in text:
                missing.append(f"{kind}: `{field}`")
    assert not missing, missing
