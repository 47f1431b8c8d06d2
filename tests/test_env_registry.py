"""The one environment registry: built-ins listed without being imported, plugins found through their
entry points (a real dist-info folder on sys.path, never a patched registry), errors that name the plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rollout_dataset.envs import ENTRY_POINT_GROUP, available_environments, get_environment, register_environment, unregister_environment
from rollout_dataset.errors import ConfigError

PLUGIN_DIR = Path(__file__).resolve().parent / "third_env"


def _dist_info(root: Path, name: str, entry: str) -> None:
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry}\n")


def test_listing_the_environments_imports_none_of_them():
    code = ("import sys\nfrom rollout_dataset.envs import available_environments\n"
            "names = available_environments()\n"
            "print(names, sorted(m for m in sys.modules if m.startswith(('rollout_dataset.recipes.coding', "
            "'rollout_dataset.recipes.crafter', 'rollout_dataset.capture', 'rollout_dataset.batch'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "['coding', 'crafter'] []"


def test_the_built_ins_are_environments_with_their_players():
    coding, crafter = get_environment("coding"), get_environment("crafter")
    assert (coding.name, coding.default_policy) == ("coding", "oracle")
    assert (crafter.name, crafter.default_policy) == ("crafter", "crafter")
    assert get_environment("coding") is coding  # loaded once


def test_an_entry_point_that_is_not_an_environment_is_refused_naming_it(tmp_path, monkeypatch):
    _dist_info(tmp_path, "not_an_env", "notanenv = json:JSONDecoder")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "notanenv" in available_environments()
    with pytest.raises(ConfigError, match=r"entry point 'notanenv' = 'json:JSONDecoder' .* has no prepare\(\)"):
        get_environment("notanenv")


def test_an_entry_point_whose_code_raises_on_import_is_named_with_the_reason(tmp_path, monkeypatch):
    (tmp_path / "exploding_env.py").write_text("raise RuntimeError('boom at import')\n")
    _dist_info(tmp_path, "exploding", "exploding = exploding_env:Env")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"entry point 'exploding'.*failed to load: RuntimeError: boom at import"):
        get_environment("exploding")


def test_an_environment_registered_in_process_is_captured_by_the_one_pipeline(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    from parrot_env import ParrotConfig, ParrotEnvironment

    from rollout_dataset.capture import capture_rollout

    registered = ParrotEnvironment()
    register_environment(registered, "parrot")
    try:
        assert get_environment("parrot") is registered
        result = capture_rollout(ParrotConfig(out_dir=tmp_path / "p", seed=0, max_turns=1))
    finally:
        unregister_environment("parrot")  # the rest of the session sees the registry as it was
    assert get_environment("parrot") is not registered
    assert result.ok, (result.errors, result.validation_failures)
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["env"] == "parrot" and summary["env_reward"] == 1.0 and summary["task_id"] == "parrot-apple"


@pytest.mark.parametrize("name", ["trace.json", "summary.json", "../escape.txt", ".hidden"])
def test_an_environments_extra_file_may_not_replace_a_core_artifact_or_leave_the_folder(tmp_path, monkeypatch, name):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    from parrot_env import ParrotConfig, ParrotEnvironment, ParrotEpisode

    from rollout_dataset.capture import run_capture

    class Overwriting(ParrotEpisode):
        def extra_files(self, outcome):
            return {name: "forged"}

    class Environment(ParrotEnvironment):
        def prepare(self, config):
            return Overwriting(config)

    with pytest.raises(ConfigError, match="must be a plain file name other than"):
        run_capture(Environment(), ParrotConfig(out_dir=tmp_path / "art", max_turns=1))
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "art").exists()


def test_a_plugin_once_loaded_is_listed_only_while_its_entry_point_is_installed(monkeypatch):
    with monkeypatch.context() as installed:
        installed.syspath_prepend(str(PLUGIN_DIR))
        get_environment("parrot")  # loaded from its entry point
        assert "parrot" in available_environments()
    assert "parrot" not in available_environments()  # off sys.path: gone from --env and the CLI's flags
    with pytest.raises(ConfigError, match="unknown environment 'parrot'"):
        get_environment("parrot")  # and no longer served from the cache
