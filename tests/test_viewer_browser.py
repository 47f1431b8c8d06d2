"""The viewer in a real browser: headless Chromium (Debian's /usr/bin/chromium) driven by Playwright.

One browser per module; the demo dataset is built once per session. Screenshots are kept under the
pytest tmp dir (``viewer-screenshots``), and the path is printed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rollout_dataset.server_runner import serve_in_thread
from rollout_dataset.viewer import export_static, viewer_server

CHROMIUM = os.environ.get("ROLLOUT_DATASET_CHROMIUM", "/usr/bin/chromium")
import playwright.sync_api as playwright_sync  # noqa: E402  (the test extras)
if not shutil.which(CHROMIUM) and not Path(CHROMIUM).is_file():
    pytest.fail(f"no Chromium at {CHROMIUM}: run `make system-deps` (apt-get install chromium)", pytrace=False)


_RECORD_CSP_VIOLATIONS = ("document.addEventListener('securitypolicyviolation', (e) => { (window.__violations = "
                          "window.__violations || []).push(e.violatedDirective + ' ' + e.sourceFile + ':' + e.lineNumber); });")


def _clean(page) -> None:
    """No script error, and nothing the page or its libraries did was blocked by the CSP."""
    assert page.errors == []
    assert page.evaluate("window.__violations || []") == []


@pytest.fixture(scope="module")
def browser():
    with playwright_sync.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("viewer-screenshots")
    print(f"viewer screenshots in {folder}")
    return folder


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    tab = context.new_page()
    tab.add_init_script(_RECORD_CSP_VIOLATIONS)
    tab.errors = []
    tab.on("pageerror", lambda error: tab.errors.append(str(error)))
    yield tab
    context.close()


@pytest.fixture(scope="module")
def dataset_url(demo_folders):
    with serve_in_thread(lambda: viewer_server(demo_folders[1]), name="viewer-browser") as server:
        yield server.url


@pytest.fixture(scope="module")
def hostile_url(hostile_tree):
    with serve_in_thread(lambda: viewer_server(hostile_tree), name="viewer-browser-hostile") as server:
        yield server.url


def _ready(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready]", timeout=20_000)
    assert page.locator("body").get_attribute("data-ready") != "error", page.locator("#errors").inner_text()


def test_the_index_lists_every_rollout_of_the_built_demo_dataset(page, dataset_url, demo_folders, shots):
    _ready(page, dataset_url)
    summary = pq.read_table(demo_folders[1] / "data" / "summary").to_pylist()
    links = page.locator("a.rollout-link").all_inner_texts()
    assert sorted(links) == sorted(r["rollout_id"] for r in summary)
    headers = page.locator(".group-header").all_inner_texts()
    assert len(headers) == len({r["group_id"] for r in summary}) and all("mean reward" in h for h in headers)
    page.screenshot(path=shots / "index.png")
    _clean(page)


def test_a_rollout_page_shows_the_datasets_tokens_trainable_tokens_and_calls(page, dataset_url, demo_folders, shots):
    sequences = pq.read_table(demo_folders[1] / "data" / "sequences").to_pylist()
    summary = pq.read_table(demo_folders[1] / "data" / "summary").to_pylist()[0]
    rid = summary["rollout_id"]
    _ready(page, dataset_url)
    page.locator("a.rollout-link", has_text=rid).click()
    page.wait_for_selector("body[data-ready=rollout]", timeout=20_000)
    assert rid in page.url
    mine = [s for s in sequences if s["rollout_id"] == rid]
    assert int(page.locator("#total-tokens").get_attribute("data-value")) == sum(len(s["input_ids"]) for s in mine)
    assert int(page.locator("#total-trainable-tokens").get_attribute("data-value")) == summary["trainable_tokens"]
    assert int(page.locator("#total-calls").get_attribute("data-value")) == summary["captured_calls"]
    assert page.locator(".tokens .tok").count() == sum(len(s["input_ids"]) for s in mine)  # small: all windows load
    assert page.locator(".tokens .tok.m1").count() == summary["trainable_tokens"]
    page.screenshot(path=shots / "rollout.png", full_page=False)
    _clean(page)


def test_hovering_a_sampled_token_shows_its_id_and_logprob(page, dataset_url, demo_folders, shots):
    seq = pq.read_table(demo_folders[1] / "data" / "sequences").to_pylist()[0]
    _ready(page, dataset_url + "rollout.html?id=" + seq["rollout_id"])
    position = seq["loss_mask"].index(1)
    token = page.locator(f'.sequence[data-sequence="{seq["sequence_index"]}"] .tok[data-i="{position}"]')
    token.scroll_into_view_if_needed()
    token.hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert f"{seq['input_ids'][position]}" in text
    assert f"{seq['logprobs'][position]:.3f}" in text
    page.screenshot(path=shots / "hover.png")


def test_the_graph_conversation_and_calls_tabs_render(page, dataset_url, demo_folders, shots):
    rid = pq.read_table(demo_folders[1] / "data" / "summary").to_pylist()[1]["rollout_id"]
    _ready(page, dataset_url + "rollout.html?id=" + rid)
    page.click("#tabs button[data-tab=graph]")
    page.wait_for_selector("#graph canvas")
    page.screenshot(path=shots / "graph.png")
    page.click("#tabs button[data-tab=conversation]")
    assert page.locator(".message.role-assistant").count() >= 1
    page.click("#tabs button[data-tab=calls]")
    assert page.locator("details[id^=call-]").count() == \
        int(page.locator("#total-calls").get_attribute("data-value"))
    _clean(page)


def test_script_in_rollout_text_does_not_run(page, hostile_url, shots):
    _ready(page, hostile_url)
    page.click("#tabs button", timeout=1000) if page.locator("#tabs button").count() else None
    assert page.evaluate("window.__pwned") is None
    _ready(page, hostile_url + "rollout.html?id=rollout-000")
    page.click("#tabs button[data-tab=conversation]")
    shown = page.locator("#tab-conversation").inner_text()
    assert "<script>window.__pwned = 1</script>" in shown, "the text is shown as text"
    assert page.locator("#tab-conversation script, #tab-conversation img").count() == 0
    assert page.evaluate("window.__pwned") is None
    page.screenshot(path=shots / "hostile.png")


def test_a_corrupted_folder_shows_its_validation_error_in_the_page(page, hostile_url, shots):
    _ready(page, hostile_url)
    assert page.locator(".badge.bad").count() == 1
    _ready(page, hostile_url + "rollout.html?id=rollout-001")
    errors = page.locator("#errors")
    assert errors.is_visible() and "rollout.json" in errors.inner_text()
    page.screenshot(path=shots / "corrupt.png")


def test_the_export_opens_from_disk_with_the_network_off(browser, demo_folders, tmp_path, shots):
    out = tmp_path / "site"
    export_static(demo_folders[1], out)
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 900})
    requests: list[str] = []
    context.on("request", lambda request: requests.append(request.url))
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    _ready(page, (out / "index.html").as_uri())
    rids = page.locator("a.rollout-link").all_inner_texts()
    assert len(rids) == 3
    page.locator("a.rollout-link").first.click()
    page.wait_for_selector("body[data-ready=rollout]", timeout=20_000)
    assert page.locator(".tokens .tok").count() == int(page.locator("#total-tokens").get_attribute("data-value"))
    page.screenshot(path=shots / "export.png")
    assert errors == [] and all(url.startswith("file://") for url in requests), requests
    context.close()


def test_an_audit_colours_tokens_by_difference_and_hover_shows_the_scorer_logprob(page, audited_tree, shots):
    with serve_in_thread(lambda: viewer_server(audited_tree), name="viewer-browser-audit") as server:
        _ready(page, server.url + "rollout.html?id=rollout-000")
        first = page.locator(".tokens .tok.m1").first
        assert "lp" in first.get_attribute("class")
        page.click("text=colour by audit |Δ|")
        assert "df3" in first.get_attribute("class")  # |Δ| 0.5: the top band (>= 0.1)
        assert "df0" in page.locator(".tokens .tok.m1").nth(1).get_attribute("class")
        first.hover()
        assert "scorer logprob" in page.locator("#tip").inner_text()
        page.click("#tabs button[data-tab=audit]")
        assert "no logprobs" in page.locator("#tab-audit").inner_text()
        page.screenshot(path=shots / "audit.png")
        _clean(page)


def test_a_crafter_rollout_has_its_decision_timeline_tab(page, crafter_tree, shots):
    with serve_in_thread(lambda: viewer_server(crafter_tree), name="viewer-browser-crafter") as server:
        _ready(page, server.url + "rollout.html?id=episode")
        page.click("#tabs button[data-tab=crafter]")
        rows = page.locator("#tab-crafter table.grid tr")
        decisions = json.loads((crafter_tree / "episode" / "rollout.json").read_text())["metadata"]["crafter"]["decisions"]
        assert rows.count() == len(decisions) + 1
        page.screenshot(path=shots / "crafter.png")
        _clean(page)


@pytest.fixture(scope="module")
def tokenizer_named_tree(demo_folders, tmp_path_factory) -> tuple[Path, Path]:
    """Two demo rollouts whose task.json names a tokenizer the viewer must not load: a Hub repo id an
    attacker chose, and a complete tokenizer folder outside PATH (absolute path)."""
    from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR

    root = tmp_path_factory.mktemp("viewer-named-tokenizers") / "tree"
    outside = root.parent / "outside-tokenizer"
    shutil.copytree(BUILTIN_TOKENIZER_DIR, outside)
    for name, spec in (("hub-id", "attacker/evil-tokenizer"), ("outside-path", str(outside))):
        shutil.copytree(demo_folders[0] / "rollout-000", root / name)
        task = json.loads((root / name / "task.json").read_text())
        task["config"]["tokenizer"] = spec
        (root / name / "task.json").write_text(json.dumps(task))
    return root, outside


def test_a_tokenizer_named_by_a_rollout_is_neither_fetched_nor_read_from_outside_path(page, tokenizer_named_tree,
                                                                                       tmp_path, shots):
    import re
    import signal
    import subprocess
    import sys

    from hub_fixture import FakeHub

    root, outside = tokenizer_named_tree
    with FakeHub() as hub:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), HF_ENDPOINT=hub.url,
                   HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "hf"))
        proc = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "view", str(root)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            url = re.search(r"http://127\.0\.0\.1:\d+/", proc.stdout.readline()).group(0)
            for rid in ("hub-id", "outside-path"):
                _ready(page, f"{url}rollout.html?id={rid}")
                note = page.locator("p.warn").first.inner_text()
                assert "not among the files given to the viewer" in note and str(outside.parent) not in note
                page.screenshot(path=shots / f"tokenizer-{rid}.png")
                _clean(page)
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        assert hub.requests == [], "the viewer asked the Hub for a tokenizer a rollout named"
    assert proc.returncode == 0 and "Traceback" not in err


def test_an_export_opens_a_rollout_whose_id_is_a_javascript_object_key(browser, oddity_tree, tmp_path):
    out = tmp_path / "site"
    export_static(oddity_tree, out)
    context = browser.new_context(offline=True)
    page = context.new_page()
    _ready(page, (out / "rollout.html").as_uri() + "?id=__proto__")
    assert page.locator("#title").inner_text().endswith("__proto__")
    assert page.locator(".tokens .tok").count() == int(page.locator("#total-tokens").get_attribute("data-value")) > 0
    context.close()


# the left edges of the first and last character of `id`'s `nth` occurrence in `selector`'s first element
_LEFT_EDGES = """([selector, id, nth]) => {
  const walker = document.createTreeWalker(document.querySelector(selector), NodeFilter.SHOW_TEXT);
  let seen = 0;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    let at = node.data.indexOf(id);
    while (at >= 0 && seen < nth) { seen++; at = node.data.indexOf(id, at + 1); }
    if (at < 0) continue;
    const edge = (i) => { const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1); return r.getBoundingClientRect().left; };
    return [edge(at), edge(at + id.length - 1)];
  }
  return null;
}"""


def test_a_right_to_left_override_in_rollout_text_does_not_reorder_the_rollout_id_after_it(page, oddity_tree):
    from viewer_fixtures import RIGHT_TO_LEFT_TITLE

    with serve_in_thread(lambda: viewer_server(oddity_tree), name="viewer-browser-oddity") as server:
        _ready(page, server.url + "rollout.html?id=__proto__")
        assert RIGHT_TO_LEFT_TITLE in page.locator("#title").text_content()
        first, last = page.evaluate(_LEFT_EDGES, ["#title", "__proto__", 0])
    assert first < last, "the id's first character is drawn left of its last"


@pytest.mark.parametrize("mode", ["served", "exported"])
def test_the_index_names_a_summary_shard_it_could_not_read(browser, demo_folders, tmp_path, mode):
    dataset = tmp_path / "dataset"
    shutil.copytree(demo_folders[1], dataset)
    (dataset / "data" / "summary" / "zzz-broken.parquet").write_bytes(b"not parquet")
    page = browser.new_page()
    if mode == "exported":
        export_static(dataset, tmp_path / "site")
        _ready(page, (tmp_path / "site" / "index.html").as_uri())
        page.wait_for_selector("body[data-loaded]", timeout=20_000)
        status = page.locator("#status").inner_text()
    else:
        with serve_in_thread(lambda: viewer_server(dataset), name="viewer-browser-broken") as server:
            _ready(page, server.url)
            page.wait_for_selector("body[data-loaded]", timeout=20_000)
            status = page.locator("#status").inner_text()
    assert page.locator("a.rollout-link").count() == 3
    assert "index stopped" in status and "zzz-broken.parquet" in status
    page.close()


def test_a_token_holding_a_right_to_left_override_does_not_reorder_the_tokens_after_it(page, dataset_url, demo_folders):
    # no tokenizer the tests ship decodes one id to U+202E, so the page's own token spans are given one
    summary = pq.read_table(demo_folders[1] / "data" / "summary").to_pylist()[0]
    _ready(page, dataset_url + "rollout.html?id=" + summary["rollout_id"])
    first, second = page.evaluate("""() => {
      const box = document.querySelector(".tokens");
      const token = (text) => el("span", "tok m1 lp0", text);
      const tokens = [token("\\u202e"), token("AB"), token("CD")];
      box.prepend(...tokens);
      return [tokens[1].getBoundingClientRect().left, tokens[2].getBoundingClientRect().left];
    }""")
    assert first < second, "the token after the override is drawn left of the one that follows it"


def test_a_right_to_left_override_in_a_tool_name_does_not_reorder_what_follows_it(page, oddity_tree):
    from viewer_fixtures import RIGHT_TO_LEFT_TOOL

    with serve_in_thread(lambda: viewer_server(oddity_tree), name="viewer-browser-oddity") as server:
        _ready(page, server.url + "rollout.html?id=rollout-000")
        page.click("#tabs button[data-tab=calls]")
        header = "#call-0 > summary"
        assert page.locator(header).text_content().count(RIGHT_TO_LEFT_TOOL) == 2
        # the call header lists both tools: the second name is drawn left to right
        first, last = page.evaluate(_LEFT_EDGES, [header, "write_file", 1])
        assert first < last, "the second tool's name is drawn reversed in the call header"
        # the conversation's tool-call label: the call id after the name is drawn left to right
        page.click("#tabs button[data-tab=conversation]")
        label = page.locator(".toolcall", has_text=RIGHT_TO_LEFT_TOOL).first
        call_id = label.locator("span.muted").text_content().strip()
        label.evaluate("(node) => node.classList.add('under-test')")
        first, last = page.evaluate(_LEFT_EDGES, [".toolcall.under-test > span.muted", call_id, 0])
        assert first < last, "the call id after the tool's name is drawn reversed"
        _clean(page)


@pytest.mark.parametrize("source", ["artifact folder", "dataset"])
def test_tokens_whose_logprobs_are_missing_are_shown_as_unknown_not_as_confident(page, logprobs_missing_tree, source):
    tree, dataset = logprobs_missing_tree
    sequences = pq.read_table(dataset / "data" / "sequences").to_pylist()
    seq = sequences[0]
    first_sampled = seq["loss_mask"].index(1)  # call 0's first sampled token: 0.0 in the dataset
    assert seq["logprobs"][first_sampled] == 0.0 and "logprobs_missing" in seq["findings"]
    later = seq["prompt_len"] + seq["turn_lengths"][0]  # past call 0: the next sampled token is call 1's
    later += seq["loss_mask"][later:].index(1)
    root = tree if source == "artifact folder" else dataset
    rid = "rollout-000" if source == "artifact folder" else seq["rollout_id"]
    with serve_in_thread(lambda: viewer_server(root), name="viewer-browser-logprobs") as server:
        _ready(page, server.url + "rollout.html?id=" + rid)
        block = page.locator('.sequence[data-sequence="0"]')
        assert "logprobs missing for call 0" in block.locator("p.logprobs-missing").inner_text()
        token = block.locator(f'.tok[data-i="{first_sampled}"]')
        classes = token.get_attribute("class").split()
        assert "lpn" in classes and not {"lp0", "lp1", "lp2", "lp3", "lp4"} & set(classes)
        assert token.evaluate("(node) => getComputedStyle(node).backgroundColor") == "rgba(0, 0, 0, 0)"
        token.scroll_into_view_if_needed()
        token.hover()
        assert "missing: not captured" in page.locator("#tip").inner_text()
        assert "lpn" not in block.locator(f'.tok[data-i="{later}"]').get_attribute("class").split()
        _clean(page)


# the left edges of the characters at `offsets` from the start of `needle` in the text of `selector`'s
# first element (the text across all its nodes, as copying it gives)
_CHAR_LEFTS = """([selector, needle, offsets]) => {
  const root = document.querySelector(selector);
  const at = root.textContent.indexOf(needle);
  if (at < 0) return null;
  return offsets.map((offset) => {
    let rest = at + offset;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (rest >= node.data.length) { rest -= node.data.length; continue; }
      const r = document.createRange(); r.setStart(node, rest); r.setEnd(node, rest + 1);
      return r.getBoundingClientRect().left;
    }
    return null;
  });
}"""


@pytest.fixture(scope="module")
def rollout_text_url(rollout_text_tree):
    with serve_in_thread(lambda: viewer_server(rollout_text_tree), name="viewer-browser-rollout-text") as server:
        yield server.url


def _in_order(page, selector: str, needle: str, first: int = 0, last: int = -1) -> bool:
    """Whether `needle`'s `first` character is drawn left of its `last` in `selector`."""
    lefts = page.evaluate(_CHAR_LEFTS, [selector, needle, [first, last % len(needle)]])
    assert lefts is not None, f"{needle!r} not in {selector}"
    return lefts[0] < lefts[1]


def _open_conversation(page, url: str) -> None:
    _ready(page, url + "rollout.html?id=right-to-left")
    page.click("#tabs button[data-tab=conversation]")
    page.evaluate("document.querySelectorAll('#tab-conversation details').forEach((d) => { d.open = true; })")


def _mark_tools_block(page) -> str:
    """Mark the first "tools offered" block of the conversation tab; its selector."""
    page.evaluate("[...document.querySelectorAll('#tab-conversation details')]"
                  ".find((d) => d.firstChild.textContent.startsWith('tools offered')).lastChild.classList.add('tools-under-test')")
    return "#tab-conversation .tools-under-test"


def test_an_override_in_a_group_id_does_not_reorder_its_group_header(page, rollout_text_url):
    _ready(page, rollout_text_url)
    page.evaluate("[...document.querySelectorAll('.group-header')].find((h) => h.textContent.includes('\\u202e'))"
                  ".classList.add('under-test')")
    assert _in_order(page, ".group-header.under-test", "mean reward")


def test_an_override_in_the_tools_offered_does_not_reorder_the_json_after_it(page, rollout_text_url):
    _open_conversation(page, rollout_text_url)
    tools = _mark_tools_block(page)
    assert _in_order(page, tools, '\u202e",', 1, 2)  # after a description: its closing quote, then the comma
    assert _in_order(page, tools, '\u202e": {', 1, 4)  # after a property name: its closing quote, then the brace
    sent = page.evaluate("fetch('api/rollout?id=right-to-left').then((r) => r.json())"
                         ".then((v) => JSON.stringify(v.conversations[0].tools, null, 1))")
    assert page.locator(tools).text_content() == sent, "copying the block gives the tools' JSON"
    _clean(page)


def test_an_override_in_a_messages_role_does_not_reorder_the_call_id_after_it(page, rollout_text_url):
    _open_conversation(page, rollout_text_url)
    page.locator(".message.role-tool .role").first.evaluate("(node) => node.classList.add('under-test')")
    assert _in_order(page, ".role.under-test", " (result of ")
    _clean(page)


def test_an_override_in_a_messages_content_stays_in_its_preformatted_block(page, rollout_text_url):
    _open_conversation(page, rollout_text_url)
    item = page.locator(".message.role-assistant", has=page.locator(".toolcall")).first
    assert item.locator("pre.content").text_content().endswith("\u202e")
    item.evaluate("(node) => node.classList.add('under-test')")
    assert _in_order(page, ".message.under-test .toolcall", "→ w")  # the tool call drawn after the content
    _clean(page)


def test_an_override_in_a_finish_reason_does_not_reorder_the_call_header_after_it(page, rollout_text_url):
    _ready(page, rollout_text_url + "rollout.html?id=right-to-left")
    page.click("#tabs button[data-tab=calls]")
    assert _in_order(page, "#call-0 > summary", " · tools ")
    _clean(page)


@pytest.mark.parametrize("tab", ["tokens", "conversation", "graph", "calls"])
def test_html_in_every_piece_of_rollout_text_is_shown_as_text(page, rollout_text_url, tab):
    from viewer_fixtures import HOSTILE

    _ready(page, rollout_text_url)
    assert HOSTILE in page.locator(".group-header").first.text_content()
    assert HOSTILE in page.locator(".tabulator-cell[tabulator-field=model]").first.text_content()
    _ready(page, rollout_text_url + "rollout.html?id=html&tab=" + tab)
    page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    assert HOSTILE in page.locator("#title").text_content()
    if tab == "conversation":
        assert json.dumps(HOSTILE)[1:-1] in page.locator(_mark_tools_block(page)).text_content()  # a JSON string
        assert page.locator(".message .role", has_text=HOSTILE).count() >= 4
        assert page.locator(".toolcall", has_text=HOSTILE).count() >= 2
    if tab == "calls":
        assert page.locator("details[id^=call-] > summary", has_text=HOSTILE).count() >= 1
    assert page.locator("main script, main img, header script, header img").count() == 0
    assert page.evaluate("window.__pwned") is None
    _clean(page)


# An external harness in one line of Python that sends opencode's session headers: a main session, a
# subagent session under it, then the main session again.
_SESSIONS_HARNESS = (
    "cmd:python3 -c 'import json, os, urllib.request as u\n"
    "for sid, parent in ((\"ses_main\", None), (\"ses_sub\", \"ses_main\"), (\"ses_main\", None)):\n"
    "    headers = {\"Content-Type\": \"application/json\", \"Authorization\": \"Bearer \" + os.environ[\"OPENAI_API_KEY\"],"
    " \"x-session-id\": sid, **({\"x-parent-session-id\": parent} if parent else {})}\n"
    "    body = {\"model\": \"local\", \"max_tokens\": 8, \"messages\": [{\"role\": \"user\", \"content\": sid}]}\n"
    "    json.load(u.urlopen(u.Request(os.environ[\"OPENAI_BASE_URL\"] + \"/chat/completions\","
    " json.dumps(body).encode(), headers)))'"
)


def test_harness_sessions_are_boxes_in_the_graph_and_listed_on_the_calls_tab(page, tmp_path, shots):
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.recipes.coding import CaptureConfig

    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "tree" / "sessions", harness=_SESSIONS_HARNESS,
                                           policy="echo", timeout_s=60))
    assert json.loads((result.out_dir / "rollout.json").read_text())["harness_sessions"][1]["parent"] == "ses_main"
    with serve_in_thread(lambda: viewer_server(tmp_path / "tree"), name="viewer-browser-sessions") as server:
        _ready(page, server.url + "rollout.html?id=sessions")
        page.click("#tabs button[data-tab=graph]")
        page.wait_for_selector("#graph canvas")
        page.locator("#tab-graph").screenshot(path=shots / "harness-sessions-graph.png")
        page.click("#tabs button[data-tab=calls]")
        text = page.locator("#tab-calls").inner_text()
        assert "harness sessions" in text and "ses_main" in text and "ses_sub" in text
        _clean(page)
