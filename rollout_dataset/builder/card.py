"""The dataset card: README.md rendered from the repo's `dataset_card.md` Jinja2 template.

Every number in the card comes from the `summary` rows alone (one small row per rollout, which also
carries the per-config row counts, tokenizer and sampling params of its rollout), so a push can
rebuild the card for the union of all shards on the Hub by downloading only the summary shards.
The YAML header (configs, dataset_info, ...) is produced with pyyaml from the config declarations.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any, Iterable

import jinja2
import yaml

from rollout_dataset.builder import contracts
from rollout_dataset.builder.aggregates import ROW_COUNT_COLUMN, CardAggregates
from rollout_dataset.builder.audit_card import KeptAudit, audit_config_entry, kept_section
from rollout_dataset.builder.card_info import CardOptions, default_citation
from rollout_dataset.builder.configs import CONFIGS, DEFAULT_CONFIG, features_yaml, resolved_columns
from rollout_dataset.builder.writer import LIST_LEVEL, TEXT_LEVEL
from rollout_dataset.errors import ArtifactError

__all__ = ["TEMPLATE_PATH", "CARD_PROSE_MAX_LINES", "contracts_source", "training_recipes", "TRAINING_RECIPES_DIR", "card_stats", "card_metadata", "render_card",
           "read_card_metadata", "card_prose_lines", "one_line", "code_span", "table_cell", "markdown_text"]

# The template lives at the repo top; `builder/dataset_card.md` links to it so that a wheel ships it too.
TEMPLATE_PATH = Path(__file__).parent / "dataset_card.md"

#: the most lines of the card's body above its first column table: what a reader scans (what it is,
#: notice, how to load, rewards, groups, trainer contracts folded); the column tables come after
CARD_PROSE_MAX_LINES = 150
# the header row that opens each config's column table in the template
_COLUMN_TABLE_HEADER = "| column | type | meaning |"

_BACKTICK_RUNS = re.compile("`+")
# what `markdown_text` escapes: the ASCII characters that can open Markdown, HTML, an entity or math
_MARKDOWN_SPECIALS = re.compile(r"[\\`*_\[\]<>&!|~$#]")

# config -> summary column holding that config's rows per rollout (None: one row per rollout)
_ROW_COUNT_COLUMN = ROW_COUNT_COLUMN


def _size_category(n: int) -> str:
    for bound, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if n < bound:
            return label
    return "10M<n<100M"


def card_stats(summary_rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts and statistics of a dataset, from its `summary` rows.

    Args:
        summary_rows: every summary row of the dataset (dicts keyed by the summary columns).

    Returns:
        A dict: ``n_rollouts``, ``rows`` per config, ``envs``/``models``/``harnesses``/``tokenizers``/
        ``stop_reasons``/``capture_levels``/``samples_modes`` counters, ``sampling_params`` (distinct, JSON), reward
        statistics (``env_reward``, ``reward_after_penalties``, ``stepwise_reward_sum``), ``trainable``,
        ``trainable_tokens``, ``timed_out``, ``n_tasks``, ``cut_cells``, ``unique_tokens``,
        ``preview_chars`` (the default preview size of the `samples` config), ``continuity``
        (on-policy mode: agent turns exact / repaired / not repaired, summed; None without the mode),
        ``n_groups`` and ``rollouts_per_group`` (statistics over groups: same env, task and dataset
        seed), ``scripted`` (rollouts per scripted policy) and ``n_scripted``, ``server_kinds`` /
        ``harness_versions`` / ``package_versions`` counters, ``tokenizer_sha256s`` (counter) and
        ``tokenizer_dir`` (True when every rollout names the one tokenizer stored in the dataset's
        `tokenizer/` folder).
    """
    return CardAggregates.from_rows(summary_rows).stats()


def card_metadata(stats: dict[str, Any], *, pretty_name: str, license: str,
                  config_bytes: dict[str, int] | None = None, arrow_bytes: dict[str, int] | None = None,
                  language: Iterable[str] = ("en",)) -> dict[str, Any]:
    """The card's YAML metadata (a dict; dumped with pyyaml).

    Args:
        stats: from `card_stats`.
        pretty_name: the dataset's display name.
        license: a Hub license id.
        config_bytes: parquet bytes per config (all shards): ``download_size``.
        arrow_bytes: Arrow (in-memory) bytes per config: ``num_bytes`` / ``dataset_size``, as
            `datasets` computes them (the parquet bytes when not given).
        language: language codes.

    Returns:
        license, pretty_name, language, task_categories, tags, size_categories, configs (one default)
        and dataset_info: per config its features, its split's row count and sizes. A config with no
        rows (but the default) is left out: `datasets` cannot load a split without rows, so every
        config the header lists loads; its empty shard, which has the schema, stays in the folder. The counts and sizes also make the metadata differ between
        dataset states, which `datasets` needs: it keys its local cache on this metadata.
    """
    config_bytes = config_bytes or {}
    configs, infos = [], []
    for spec in CONFIGS:
        if not stats["rows"][spec.name] and spec.name != DEFAULT_CONFIG:
            continue  # `datasets` refuses a split without rows ("Instruction 'train' corresponds to no data")
        entry: dict[str, Any] = {"config_name": spec.name,
                                 "data_files": [{"split": "train", "path": f"data/{spec.name}/*.parquet"}]}
        if spec.name == DEFAULT_CONFIG:
            entry["default"] = True
        configs.append(entry)
        nbytes = int(config_bytes.get(spec.name, 0))
        arrow = int((arrow_bytes or config_bytes).get(spec.name, 0))
        infos.append({"config_name": spec.name, "features": features_yaml(spec.name),
                      "splits": [{"name": "train", "num_bytes": arrow, "num_examples": stats["rows"][spec.name]}],
                      "download_size": nbytes, "dataset_size": arrow})
    return {
        "license": license,
        "language": list(language),
        "pretty_name": pretty_name,
        "task_categories": ["reinforcement-learning", "text-generation"],
        "tags": ["agent", "rollouts", "tool-use", "rl", "token-level", "rollout-dataset"],
        "size_categories": [_size_category(stats["n_rollouts"])],
        "configs": configs,
        "dataset_info": infos,
    }


#: the card's training recipes (TRL scripts, one per way to train), pasted under "Training recipes"
TRAINING_RECIPES_DIR = Path(__file__).resolve().parent / "training_recipes"
#: the dataset a recipe trains on, as its source names it (the card puts the repo id there)
RECIPE_DATASET_PLACEHOLDER = "path/to/DATASET_DIR"


def training_recipes(repo_id: str | None = None) -> dict[str, str]:
    """The training recipes' source, by name (``sft_conversations``, ``sft_sequences``, ``grpo_offline``).

    Each is a whole script for TRL that needs the contracts' source pasted above it
    (`contracts_source`); docs/training.md shows the same scripts (tests/test_training_recipes.py
    checks that they are the same).

    Args:
        repo_id: the dataset the scripts load (default: the placeholder ``path/to/DATASET_DIR``).

    Returns:
        ``{name: source}``, trailing blank lines stripped.
    """
    recipes = {}
    for path in sorted(TRAINING_RECIPES_DIR.glob("*.py.txt")):
        text = path.read_text(encoding="utf-8").rstrip()
        recipes[path.name.removesuffix(".py.txt")] = text.replace(RECIPE_DATASET_PLACEHOLDER,
                                                                  repo_id or RECIPE_DATASET_PLACEHOLDER)
    return recipes


def contracts_source() -> str:
    """The source of `rollout_dataset.builder.contracts`, as the card pastes it (stdlib only).

    Returns:
        The module's text, stripped of trailing blank lines.
    """
    return inspect.getsource(contracts).rstrip()


def one_line(text: Any) -> str:
    """A rollout-derived string (a model, env or harness name, a refusal reason) flattened to one card line.

    The card's `one_line` filter: every line break (``\\n``, ``\\r``, the Unicode line separators) becomes
    a space, so a hostile name can neither start a markdown heading (a fake ``## Logprob audit``) nor
    break a table row.

    Args:
        text: the value (rendered with `str`).

    Returns:
        The text on one line.
    """
    return " ".join(str(text).splitlines())


def code_span(text: Any) -> str:
    """A rollout-derived name as one Markdown code span: the card's `code_span` filter.

    CommonMark's rule: a span opened by a run of N backticks ends at the next run of exactly N, and its
    content is shown as text (HTML in it is inert, as is Markdown). So the delimiter is one backtick
    longer than the longest run inside; the content is padded with a space on each side when it starts
    or ends with a backtick (which would join the delimiter) or both starts and ends with a space
    (which CommonMark would strip). The name is put on one line first (`one_line`). An empty name is a
    span holding one space. Inside a table cell, pass the result through `table_cell` too.

    Args:
        text: the name (rendered with `str`).

    Returns:
        The code span, delimiters included, showing exactly ``one_line(text)``.
    """
    content = one_line(text)
    if not content:
        return "` `"
    longest = max((len(run) for run in _BACKTICK_RUNS.findall(content)), default=0)
    fence = "`" * (longest + 1)
    if content.startswith("`") or content.endswith("`") or (
            content.startswith(" ") and content.endswith(" ") and content.strip(" ")):
        content = f" {content} "
    return f"{fence}{content}{fence}"


def table_cell(text: Any) -> str:
    """Markdown (such as a `code_span`) made safe for one cell of a table row: the card's `table_cell` filter.

    A GFM table splits a row at every ``|`` not escaped, inside code spans too, before anything else;
    so every ``|`` is escaped as ``\\|``, which the table takes out again (a code span then shows ``|``).
    Line breaks become spaces (`one_line`): a row is one line.

    Args:
        text: the cell's Markdown.

    Returns:
        The same Markdown, on one line, with no unescaped ``|``.
    """
    return one_line(text).replace("|", "\\|")


def markdown_text(text: Any) -> str:
    """A rollout-derived string as literal Markdown text outside a code span: the card's `markdown_text` filter.

    On one line (`one_line`), with every ASCII character that can open Markdown or HTML (emphasis, a
    link or image, raw HTML, an entity, a code span, math, a table cell's edge) backslash-escaped, as
    CommonMark allows for any ASCII punctuation: ``<img onerror=...>`` is shown as text, not run.

    Args:
        text: the string (rendered with `str`).

    Returns:
        Markdown that renders as exactly ``one_line(text)``.
    """
    return _MARKDOWN_SPECIALS.sub(r"\\\g<0>", one_line(text))


def render_card(summary_rows: Iterable[dict[str, Any]] | CardAggregates, *, template: str | Path | None = None,
                repo_id: str | None = None, pretty_name: str | None = None, license: str | None = None,
                config_bytes: dict[str, int] | None = None, traces_repo_id: str | None = None,
                arrow_bytes: dict[str, int] | None = None, options: CardOptions | None = None,
                audit: KeptAudit | None = None) -> str:
    """Render README.md for a dataset.

    Args:
        summary_rows: every summary row of the dataset, or their `CardAggregates` (what a streaming
            build keeps instead of the rows; the card is the same).
        template: a Jinja2 template file (default: the repo's top-level `dataset_card.md`).
        repo_id: the Hub repo id for the loading examples (default: a local path placeholder).
        pretty_name: the dataset's display name (overrides `options.pretty_name`).
        license: a Hub license id (overrides `options.license`).
        config_bytes: parquet bytes per config over all shards (`download_size`).
        arrow_bytes: Arrow bytes per config over all shards (`num_bytes`, `dataset_size`).
        options: the author's card options (title, license, language, homepage, repository, citation).
        traces_repo_id: the companion repo holding the trace-viewer sessions (linked), if pushed.
        audit: the dataset's `audit` config (`builder.audit_card.kept_audit`): its YAML entry and card
            section are kept, the section opened by a coverage note when the audit's rows no longer
            match the rollouts.

    Returns:
        The README text: YAML header + body.

    Raises:
        ArtifactError: the template file does not exist.
    """
    path = Path(template) if template else TEMPLATE_PATH
    if not path.is_file():
        raise ArtifactError(f"{path}: dataset card template not found (pass template=PATH)")
    options = options or CardOptions()
    pretty_name = pretty_name or options.pretty_name
    license = license or options.license
    aggregates = summary_rows if isinstance(summary_rows, CardAggregates) else CardAggregates.from_rows(summary_rows)
    stats = aggregates.stats()
    meta = card_metadata(stats, pretty_name=pretty_name, license=license, config_bytes=config_bytes,
                         arrow_bytes=arrow_bytes, language=options.language)
    citation = options.citation or default_citation(pretty_name, repo_id, stats["year"] or 1970)
    configs = [{"name": s.name, "row": s.row, "description": s.description, "default": s.name == DEFAULT_CONFIG,
                "rows": stats["rows"][s.name],
                "columns": [{"name": c.name, "dtype": c.dtype, "description": table_cell(c.description)}
                            for c in resolved_columns(s.name)]}
               for s in CONFIGS]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["one_line"] = one_line
    env.filters["code_span"] = code_span
    env.filters["table_cell"] = table_cell
    env.filters["markdown_text"] = markdown_text
    body = env.from_string(path.read_text(encoding="utf-8")).render(
        stats=stats, configs=configs, pretty_name=pretty_name, default_config=DEFAULT_CONFIG,
        repo_id=repo_id or RECIPE_DATASET_PLACEHOLDER, json=json, contracts_source=contracts_source(),
        recipes=training_recipes(repo_id),
        traces_repo_id=traces_repo_id, options=options, citation=citation,
        encodings={"text_level": TEXT_LEVEL, "list_level": LIST_LEVEL})
    if audit is not None:
        meta["configs"].append(audit_config_entry())
        section = kept_section(audit, stats["n_rollouts"])
        if section:
            body = body.rstrip("\n") + "\n\n" + section
    header = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{header}---\n\n{body.lstrip()}"


def read_card_metadata(readme_text: str) -> dict[str, Any]:
    """Parse the YAML header of a README.md.

    Args:
        readme_text: the README text.

    Returns:
        The metadata dict (empty when there is no header).
    """
    if not readme_text.startswith("---\n"):
        return {}
    end = readme_text.find("\n---\n", 4)
    return yaml.safe_load(readme_text[4:end]) if end > 0 else {}


def card_prose_lines(readme_text: str) -> list[str]:
    """The lines of a card's body above its first column table: the part a reader scans.

    Args:
        readme_text: a rendered card (YAML header + body).

    Returns:
        The body's lines (YAML header left out) before the first config's column table; the whole
        body when it has no column table.
    """
    body = readme_text
    if readme_text.startswith("---\n"):
        end = readme_text.find("\n---\n", 4)
        body = readme_text[end + len("\n---\n"):] if end > 0 else readme_text
    lines = body.lstrip("\n").splitlines()
    for i, line in enumerate(lines):
        if line.strip() == _COLUMN_TABLE_HEADER:
            return lines[:i]
    return lines
