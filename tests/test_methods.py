"""`lmpo methods` and docs/methods-reference.md's table, generated from the registries."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmpo import methods
from lmpo.advantages import advantage_meta, list_advantages
from lmpo.cli import main
from lmpo.errors import ConfigError
from lmpo.losses import list_losses
from lmpo.rollout import CONTROLLERS, list_controllers

PAGE = Path(__file__).resolve().parents[1] / "docs" / "methods-reference.md"


def test_the_methods_table_is_current():
    assert methods.readme_block() in PAGE.read_text(), \
        "the methods table is stale: run `lmpo methods --readme docs/methods-reference.md`"


def test_every_registered_method_is_a_row_with_its_source():
    rows = {(r["kind"], r["name"]): r for r in methods.rows()}
    want = {("loss", n) for n in list_losses()} | {("advantage", n) for n in list_advantages()}
    want |= {("controller", n) for n in list_controllers() if n != "none"}
    from lmpo.rollout import CORRECTIONS, list_corrections

    want |= {("correction", CORRECTIONS.meta(n).get("family") or n) for n in list_corrections()}
    from lmpo.trainer.schedules import list_schedules

    want |= {("schedule", n) for n in list_schedules() if n != "fixed"}
    assert set(rows) == want and ("schedule", "adaptive_kl") in rows
    assert ("correction", "rs_<mode>") in rows and ("correction", "rs_token_k1") not in rows
    for r in rows.values():
        assert r["title"] and r["source"] and r["summary"] and "|" not in r["summary"], r
    assert rows[("loss", "output_reset")]["presets"] == ["grpo_or", "ppo_or"]
    assert rows[("advantage", "gae")]["presets"] == ["base_ac", "base_long"]
    assert all(advantage_meta(n)["title"] for n in list_advantages())
    assert all(CONTROLLERS.meta(n)["title"] for n in list_controllers())


def test_the_readme_is_rewritten_between_its_markers(tmp_path, capsys):
    path = tmp_path / "README.md"
    path.write_text(f"intro\n{methods.BEGIN}\nstale\n{methods.END}\nrest\n")
    assert main(["methods", "--readme", str(path)]) == 0
    text = path.read_text()
    assert text == f"intro\n{methods.readme_block()}\nrest\n"
    assert not methods.rewrite_readme(path)  # current: nothing changes
    (tmp_path / "bare.md").write_text("no markers\n")
    with pytest.raises(ConfigError, match="has no methods table markers"):
        methods.rewrite_readme(tmp_path / "bare.md")
    assert main(["methods", "--markdown"]) == 0
    assert "| loss | `cegppo` | CE-GPPO | arXiv 2509.20712 |" in capsys.readouterr().out


def test_every_cross_cutting_option_is_a_config_key_and_found_by_its_names(capsys):
    """Each option's key is a TrainConfig key (a loss's or estimator's hyper-parameter
    for `loss.hparams.*` / `advantage.hparams.*`), and `lmpo methods TEXT` finds it by a
    name papers give it and by its engine spelling."""
    import dataclasses
    import typing

    from lmpo.advantages import advantage_hparams
    from lmpo.cli import main
    from lmpo.losses import list_losses, loss_hparams
    from lmpo.options import OPTIONS, find
    from lmpo.trainer.train_config import TrainConfig

    for o in OPTIONS:
        section, _, rest = o.key.partition(".")
        if rest.startswith("hparams."):
            name = rest.split(".", 1)[1]
            owners = [n for n in list_losses() if name in loss_hparams(n)] \
                if section == "loss" else [n for n in ["grpo"] if name in advantage_hparams(n)]
            assert owners, o.key
            continue
        cls = TrainConfig
        for part in o.key.split("."):
            assert dataclasses.is_dataclass(cls), o.key
            hints = typing.get_type_hints(cls)
            assert part in {f.name for f in dataclasses.fields(cls)}, o.key
            cls = hints[part]
    assert [o.key for o in find("opsm")] == ["loss.off_policy_mask_threshold"]
    assert [o.key for o in find("off-policy sequence mask")] == \
        ["loss.off_policy_mask_threshold"]
    assert "loss.mask_truncated" in [o.key for o in find("mask_truncated_completions")]
    assert "rollout.correction" in [o.key for o in find("rollout_rs")]
    assert main(["methods", "OPSM"]) == 0
    assert "loss.off_policy_mask_threshold" in capsys.readouterr().out
    assert main(["methods", "no-such-method-anywhere"]) == 1
    assert "no method or option mentions" in capsys.readouterr().err


def test_every_part_prints_in_full_and_the_page_holds_the_same_tables(capsys):
    """`lmpo methods NAME` for every registered part: its formula and every
    hyper-parameter with its default and declared domain; docs/methods-reference.md holds
    the generated per-part tables."""
    from lmpo import method_detail
    from lmpo.rollout.controllers.registry import CONTEXT

    assert method_detail.markdown_all() in PAGE.read_text(), \
        "the per-part tables are stale: run `lmpo methods --readme docs/methods-reference.md`"
    for section, reg in methods.registries().items():
        for name in reg.names():
            d = method_detail.detail(section, name)
            assert d["title"] and d["summary"], (section, name)
            own = [h for h in reg.hparams(name) if section != "controller" or h not in CONTEXT]
            assert [h["name"] for h in d["hparams"]] == own
            for h in d["hparams"]:
                assert h["domain"] != "-", (section, name, h["name"])  # every one declared
            assert method_detail.lines(d)[0].startswith(f"{section} `{name}`")
    assert main(["methods", "cegppo"]) == 0
    out = capsys.readouterr().out
    assert "beta1 = 0.5  in [0, inf)" in out and "L = -beta1 (1-eps_low) r/sg(r) A" in out
    assert "verl: `actor_rollout_ref.actor.clip_ratio_low` else " \
           "`actor_rollout_ref.actor.clip_ratio`; trl: `GRPOConfig.epsilon`" in out
    assert main(["methods", "grpo"]) == 0
    assert "scale = 'group'  in {group, batch, none}  [from trl: `GRPOConfig.scale_rewards`]" \
        in capsys.readouterr().out
