// One rollout's page: header, token view (by sequence, loaded window by window), conversation,
// prefix graph (cytoscape), per-call details, Crafter decisions, audit. Text only via textContent.
"use strict";

const params = new URLSearchParams(location.search);
const rolloutId = params.get("id") || "";

// a null logprob is unknown (never captured: the dataset's 0.0 there is not a confidence): no colour
function lpClass(lp) {
  if (lp === null || lp === undefined) return "lpn";
  if (lp > -0.1) return "lp0";
  if (lp > -0.5) return "lp1";
  if (lp > -1.5) return "lp2";
  if (lp > -3) return "lp3";
  return "lp4";
}

function diffClass(captured, scored) {
  if (scored === null || scored === undefined || captured === null) return "dfn";
  const d = Math.abs(captured - scored);
  if (d < 1e-3) return "df0";
  if (d < 1e-2) return "df1";
  if (d < 1e-1) return "df2";
  return "df3";
}

// ---------------------------------------------------------------------------------------- header
function renderHeader(view) {
  const s = view.summary || {};
  const t = view.task || {};
  const box = document.getElementById("header");
  // each piece of rollout text isolated: a right-to-left override in a title cannot reorder the id after it
  document.getElementById("title").replaceChildren(isolated(t.title || s.task_id || "rollout"),
    document.createTextNode(" — "), isolated(view.id));
  document.title = isolatedText(s.task_id || view.id) + " — rollout";
  const totals = view.totals || {};
  const counts = el("div", "totals");
  for (const [key, label] of [["calls", "calls"], ["tokens", "tokens"], ["trainable_tokens", "trainable tokens"], ["sequences", "sequences"]]) {
    const item = el("span", "total", null, el("b", null, fmt(totals[key])), el("span", "muted", " " + label));
    item.id = "total-" + key.replace("_", "-");
    item.dataset.value = String(totals[key]);
    counts.appendChild(item);
  }
  box.appendChild(counts);
  const timings = s.timings || {};
  box.appendChild(kvTable([
    ["rollout id", s.rollout_id], ["environment", s.env], ["harness", s.harness], ["model", s.model],
    ["reward", s.env_reward], ["reward after penalties", s.reward_after_penalties], ["penalties", s.penalties],
    ["stop reason", s.stop_reason], ["timed out", s.timed_out], ["held-out tests passed", fmt(s.held_out_passed) + " / " + fmt(s.held_out_tests)],
    ["capture level", s.capture_level], ["trainable", s.trainable], ["findings", s.findings_count],
    ["stepwise", s.stepwise], ["env metrics", s.env_metrics],
    ["timings (s)", isolatedList(Object.entries(timings).map(([k, v]) => el("span", null, null, isolated(k), piece(" "), isolated(fmt(v)))), ", ")],
  ], "header-kv"));
  if (view.tokenizer_note) box.appendChild(el("p", "warn", view.tokenizer_note));
  if (t.instruction) box.appendChild(folded("task statement", pre(t.instruction), true));
  if (view.visible_tests) box.appendChild(folded("visible examples", pre(view.visible_tests)));
  if ((view.held_out_tests || []).length) {
    const table = el("table", "grid");
    table.appendChild(el("tr", null, null, el("th", null, "#"), el("th", null, "input"), el("th", null, "expected output")));
    view.held_out_tests.forEach((h, i) => table.appendChild(el("tr", null, null, el("td", null, i), el("td", null, null, pre(h.input)), el("td", null, null, pre(h.output)))));
    box.appendChild(folded("held-out tests (" + fmt(s.held_out_passed) + " of " + view.held_out_tests.length + " passed)", table));
  }
}

// ----------------------------------------------------------------------------------------- tokens
const tip = document.getElementById("tip");
const LOGPROB_MISSING = "missing: not captured (the dataset holds 0.0 here; a trainer must recompute it)";
let colourBy = "logprob";
const tokenStore = {};
const colourClass = (token) => colourBy === "audit" ? diffClass(token[4], token[6]) : lpClass(token[4]);

function showTip(event, token, position) {
  const [id, text, special, mask, lp, call, scored, reasoning] = token;
  tip.replaceChildren(kvTable([
    ["position", position], ["id", id], ["text", el("span", null, null, piece('"'), isolated(JSON.stringify(text).slice(1, -1)), piece('"'))],
    ["special", special], ["reasoning", !!reasoning],
    ["loss mask", mask], ["logprob", !mask ? "n/a (context token)" : lp === null || lp === undefined ? LOGPROB_MISSING : lp], ["call", call],
    ...(scored !== null && scored !== undefined ? [["scorer logprob", scored], ["|Δ|", lp === null || lp === undefined ? "n/a" : Math.abs(lp - scored)]] : []),
  ]));
  tip.hidden = false;
  tip.style.left = Math.min(event.pageX + 12, window.scrollX + window.innerWidth - 320) + "px";
  tip.style.top = (event.pageY + 14) + "px";
}

function renderSequence(view, seq, container) {
  const block = el("div", "sequence");
  block.dataset.sequence = String(seq.index);
  if (seq.new_root) block.appendChild(el("div", "fragment-break", "fragment break: this sequence starts at call " + seq.root_id +
    ", whose prompt did not extend the previous sequence's tokens (re-rendered from scratch)"));
  const missing = seq.logprobs_missing_calls || [];
  if (missing.length) block.appendChild(el("p", "warn logprobs-missing", "logprobs missing for call" + (missing.length > 1 ? "s " : " ") +
    missing.join(", ") + ": their sampled tokens are shown uncoloured (the dataset holds 0.0 there; a trainer must recompute them)"));
  block.appendChild(el("h3", null, "sequence " + seq.index + " · ", isolated(seq.role), piece((seq.trainable ? " · trainable" : "") +
    " · " + seq.n_tokens + " tokens · " + seq.n_trainable + " trainable · calls " + (seq.node_ids || []).join(", "))));
  const stream = el("div", "tokens");
  const tokens = tokenStore[seq.index] = [];
  stream.addEventListener("mouseover", (event) => {
    const i = event.target.dataset && event.target.dataset.i;
    if (i !== undefined) showTip(event, tokens[Number(i)], Number(i));
  });
  stream.addEventListener("mouseleave", () => { tip.hidden = true; });
  block.appendChild(stream);
  const sentinel = el("div", "sentinel muted", seq.n_tokens ? "loading…" : "no token ids in this sequence");
  block.appendChild(sentinel);
  container.appendChild(block);
  let next = 0;
  let busy = false;
  async function more() {
    if (busy || next >= seq.n_tokens) return;
    busy = true;
    const page = await RD.tokens(view.id, seq.index, next);
    const starts = new Set(page.call_starts);
    const fragment = document.createDocumentFragment();
    page.tokens.forEach((token, k) => {
      const position = page.start + k;
      if (starts.has(position)) fragment.appendChild(el("span", "callmark", "call " + token[5]));
      tokens[position] = token;
      const span = el("span", "tok " + (token[3] ? "m1 " + colourClass(token) : "m0") + (token[2] ? " sp" : "") + (token[7] ? " rs" : ""), token[1]);
      span.dataset.i = String(position);
      fragment.appendChild(span);
    });
    stream.appendChild(fragment);
    next = page.start + page.tokens.length;
    sentinel.textContent = next < seq.n_tokens ? "showing " + next + " of " + seq.n_tokens + " tokens (scroll for more)" : "";
    stream.dataset.loaded = String(next);
    busy = false;
    if (next < seq.n_tokens && sentinel.getBoundingClientRect().top < window.innerHeight * 2) more();
  }
  new IntersectionObserver((entries) => { if (entries.some((e) => e.isIntersecting)) more(); }, { rootMargin: "800px" }).observe(sentinel);
  return more();
}

function renderTokens(view) {
  const box = document.getElementById("tab-tokens");
  const legend = el("div", "legend");
  legend.appendChild(el("span", "tok m0", "context (mask 0)"));
  for (const [cls, label] of [["lp0", "logprob > -0.1"], ["lp1", "> -0.5"], ["lp2", "> -1.5"], ["lp3", "> -3"], ["lp4", "≤ -3"], ["lpn", "logprob missing"]]) legend.appendChild(el("span", "tok m1 " + cls, label));
  legend.appendChild(el("span", "tok sp", "special token"));
  legend.appendChild(el("span", "tok rs", "reasoning (think block)"));
  if (view.audit) {
    const toggle = el("button", null, "colour by audit |Δ|");
    toggle.addEventListener("click", () => {
      colourBy = colourBy === "audit" ? "logprob" : "audit";
      toggle.textContent = colourBy === "audit" ? "colour by logprob" : "colour by audit |Δ|";
      box.querySelectorAll(".sequence").forEach((block) => {
        const tokens = tokenStore[block.dataset.sequence] || [];
        block.querySelectorAll(".tok.m1[data-i]").forEach((span) => {
          span.classList.remove("lp0", "lp1", "lp2", "lp3", "lp4", "lpn", "df0", "df1", "df2", "df3", "dfn");
          span.classList.add(colourClass(tokens[Number(span.dataset.i)]));
        });
      });
    });
    legend.appendChild(toggle);
    for (const [cls, label] of [["df0", "|Δ| < 1e-3"], ["df1", "< 1e-2"], ["df2", "< 1e-1"], ["df3", "≥ 1e-1"], ["dfn", "not scored"]]) legend.appendChild(el("span", "tok m1 " + cls, label));
  }
  box.appendChild(legend);
  if (!view.sequences || !view.sequences.length) box.appendChild(el("p", "muted", "no sequences (no token ids captured)"));
  return Promise.all((view.sequences || []).map((seq) => renderSequence(view, seq, box)));
}

// ----------------------------------------------------------------------------------- conversation
function renderConversation(view) {
  const box = document.getElementById("tab-conversation");
  if (!view.conversations.length) { box.appendChild(el("p", "muted", "no conversation (no chat messages recorded)")); return; }
  for (const conv of view.conversations) {
    box.appendChild(el("h3", null, "sequence " + conv.sequence_index + " — " + conv.messages.length + " messages"));
    if (conv.tools) box.appendChild(folded("tools offered (" + (Array.isArray(conv.tools) ? conv.tools.length : "?") + ")", el("pre", "tools", null, ...jsonPieces(conv.tools, " "))));
    for (const m of conv.messages) {
      const item = el("div", "message role-" + String(m.role).replace(/[^a-z]/g, ""));
      item.appendChild(el("div", "role", null, isolated(m.role), ...(m.tool_call_id ? [piece(" (result of "), isolated(m.tool_call_id), piece(")")] : [])));
      if (m.reasoning) item.appendChild(folded("reasoning", pre(m.reasoning)));
      if (m.content) item.appendChild(pre(m.content, "content"));
      for (const call of m.tool_calls || []) item.appendChild(el("div", "toolcall", null, el("b", null, "→ ", isolated(call.name)),
        el("span", "muted", " ", isolated(call.id || "")), pre(call.arguments)));
      box.appendChild(item);
    }
  }
}

// ------------------------------------------------------------------------------------------ graph
let graphDrawn = false;
function renderGraph(view) {
  if (graphDrawn) return;
  graphDrawn = true;
  const elements = [];
  // the harness's own sessions as boxes, a subagent's box inside its parent's (ids by position: a session id is harness text)
  const sessionBox = new Map();
  (view.harness_sessions || []).forEach((h, k) => sessionBox.set(h.session_id, "h" + k));
  for (const h of view.harness_sessions || []) {
    const data = { id: sessionBox.get(h.session_id), label: "session " + isolatedText(h.session_id) + (h.parent && !h.parent_seen ? " (parent not here)" : "") };
    if (h.parent_seen && sessionBox.has(h.parent)) data.parent = sessionBox.get(h.parent);
    elements.push({ data, classes: "harness-session" });
  }
  for (const n of view.graph.nodes) {
    const classes = [n.role, n.root ? "root" : "", n.fork ? "fork" : "", n.discarded ? "discarded" : "", n.error ? "failed" : ""].filter(Boolean).join(" ");
    const data = { id: "n" + n.id, label: "#" + n.id + " " + isolatedText(n.role) + (n.root ? " (root)" : "") + (n.fork ? " (fork)" : "") };
    if (n.harness_session && sessionBox.has(n.harness_session)) data.parent = sessionBox.get(n.harness_session);
    elements.push({ data, classes });
  }
  for (const [a, b] of view.graph.edges) elements.push({ data: { id: "e" + a + "-" + b, source: "n" + a, target: "n" + b } });
  const cy = cytoscape({
    container: document.getElementById("graph"), elements,
    layout: { name: "breadthfirst", directed: true, spacingFactor: 1.1 },
    style: [
      { selector: "node", style: { label: "data(label)", "font-size": 10, "background-color": "#4a78c2", "text-valign": "bottom", width: 18, height: 18 } },
      { selector: "node.auxiliary", style: { "background-color": "#9a7bc4" } },
      { selector: "node.none", style: { "background-color": "#999" } },
      { selector: "node.root", style: { shape: "diamond", width: 24, height: 24 } },
      { selector: "node.fork", style: { "border-width": 3, "border-color": "#e0a000" } },
      { selector: "node.discarded", style: { "background-color": "#d04040", shape: "rectangle" } },
      { selector: "node.failed", style: { "border-width": 3, "border-color": "#000" } },
      { selector: "node.harness-session", style: { "background-color": "#eef2f8", "border-width": 1, "border-color": "#8aa0c0", "text-valign": "top", shape: "round-rectangle" } },
      { selector: "edge", style: { width: 1.5, "curve-style": "bezier", "target-arrow-shape": "triangle", "line-color": "#aaa", "target-arrow-color": "#aaa" } },
    ],
  });
  cy.on("tap", "node", (event) => {
    if (!event.target.id().startsWith("n")) return;  // a harness session's box, not a call
    const id = Number(event.target.id().slice(1));
    showTab("calls");
    const row = document.getElementById("call-" + id);
    if (row) { row.open = true; row.scrollIntoView(); }
  });
  document.getElementById("graph-legend").textContent = view.graph.nodes.length + " calls, " +
    view.graph.nodes.filter((n) => n.root).length + " roots, " + view.graph.nodes.filter((n) => n.fork).length + " forks, " +
    view.graph.nodes.filter((n) => n.discarded).length + " discarded · diamond: root · gold ring: fork · red square: discarded retry · " +
    "blue: agent · purple: auxiliary · black ring: error · boxes: the harness's own sessions, a subagent's inside its parent's · click a node for its call";
}

// ------------------------------------------------------------------------------------------ calls
function samplingTable(requested, effective) {
  const keys = [...new Set([...Object.keys(requested || {}), ...Object.keys(effective || {})])].sort();
  const table = el("table", "grid");
  table.appendChild(el("tr", null, null, el("th", null, "parameter"), el("th", null, "requested"), el("th", null, "effective (sent upstream)")));
  for (const key of keys) {
    const a = (requested || {})[key];
    const b = (effective || {})[key];
    const row = el("tr", JSON.stringify(a) === JSON.stringify(b) ? null : "changed", null, el("td", null, null, isolated(key)),
      el("td", null, null, a === undefined ? piece("—") : isolated(fmt(a))), el("td", null, null, b === undefined ? piece("—") : isolated(fmt(b))));
    table.appendChild(row);
  }
  return table;
}

function renderCalls(view) {
  const box = document.getElementById("tab-calls");
  const s = view.summary || {};
  const sessions = (view.harness_sessions || []).map((h) => el("div", null, null, piece("\u00a0\u00a0".repeat(h.depth) + (h.depth ? "└ " : "")),
    isolated(h.session_id), piece(" · " + h.calls.length + " calls" + (h.parent && !h.parent_seen ? " · parent " : "")),
    h.parent && !h.parent_seen ? isolated(h.parent) : null, piece(h.parent && !h.parent_seen ? " (not in this rollout)" : "")));
  box.appendChild(kvTable([["context fitting", view.context_fit], ["on-policy continuity", view.continuity],
    ["harness sessions", sessions.length ? el("div", null, null, ...sessions) : "none sent"]]));
  for (const c of view.calls) {
    // the tool names the model wrote are rollout text: each isolated, so one cannot reorder the next
    const tools = c.tool_calls.length ? [" · tools ", ...c.tool_calls.flatMap((name, k) => k ? [", ", isolated(name)] : [isolated(name)])] : [];
    const title = ["call " + c.index + " · ", isolated(c.role || "—"), " · ", isolated(c.endpoint), " · status " + fmt(c.status) + " · " +
      fmt(c.latency_ms, 1) + " ms · prompt " + fmt(c.n_prompt_ids) + " / sampled " + fmt(c.n_completion_ids) + " · ",
      isolated(fmt(c.finish_reason)), ...tools, c.error ? " · ERROR" : ""];
    const body = el("div");
    body.appendChild(kvTable([["stream", c.stream], ["time to first token (ms)", c.ttft_ms], ["capture level", c.capture_level],
      ["token source", c.token_source], ["trained", c.trained], ["proxy changed", c.upstream_changes],
      ["notes", (c.notes || []).length ? isolatedList(c.notes, "; ") : "none"],
      ["context fitting", (c.context_fit || []).length ? isolatedList(c.context_fit.map((f) => el("span", null, null, isolated(f.field), piece(" "),
        isolated(fmt(f.requested)), piece(" → "), isolated(fmt(f.effective)))), "; ") : "not lowered"],
      ["on-policy continuity", c.continuity], ["harness session", c.harness_session], ["spawned from session", c.harness_parent_session],
      ["model server", c.model_server], ["error", c.error]]));
    body.appendChild(samplingTable(c.requested_sampling_params, c.effective_sampling_params));
    const details = folded(title, body);
    details.id = "call-" + c.index;
    if (c.error) details.classList.add("failed");
    box.appendChild(details);
  }
}

// ---------------------------------------------------------------------------------------- crafter
function renderCrafter(view) {
  const box = document.getElementById("tab-crafter");
  const c = view.crafter;
  box.appendChild(kvTable([["achievements unlocked", c.achievements_unlocked], ["Crafter return", c.crafter_return], ["unlocked", isolatedList(c.unlocked, ", ")]]));
  const table = el("table", "grid");
  table.appendChild(el("tr", null, null, el("th", null, "decision"), el("th", null, "actions"), el("th", null, "env steps"), el("th", null, "invalid"), el("th", null, "reward"), el("th", null, "newly unlocked")));
  for (const d of c.decisions) {
    const row = el("tr", (d.newly_unlocked || []).length ? "unlock" : null, null, el("td", null, d.turn), el("td", null, null, isolatedList(d.actions, " ")),
      el("td", null, fmt(d.env_steps)), el("td", null, fmt(d.invalid)), el("td", null, fmt(d.reward)), el("td", null, null, isolatedList(d.newly_unlocked, ", ")));
    table.appendChild(row);
  }
  box.appendChild(table);
}

// ------------------------------------------------------------------------------------------ audit
function renderAudit(view) {
  const box = document.getElementById("tab-audit");
  const a = view.audit;
  box.appendChild(kvTable([["scorer", a.scorer], ["model", a.model], ["dtype", a.dtype], ...Object.entries(a.summary || {})]));
  if ((a.not_comparable || []).length) {
    const lines = el("pre", null, null, ...a.not_comparable.flatMap((n, k) => [piece((k ? "\n" : "") + "call " + fmt(n.call_index) + ": "), isolated(n.reason)]));
    box.appendChild(folded("not comparable (" + a.not_comparable.length + ")", lines, true));
  }
  const table = el("table", "grid");
  table.appendChild(el("tr", null, null, ...["sequence", "position", "token id", "token", "call", "captured", "scored", "|Δ|"].map((h) => el("th", null, h))));
  for (const w of a.worst || []) table.appendChild(el("tr", null, null, ...[w.sequence_index, w.position, w.token_id, JSON.stringify(w.token), w.call_index, fmt(w.captured, 4), fmt(w.scored, 4), fmt(w.abs_diff, 4)].map((v) => el("td", null, null, isolated(v)))));
  box.appendChild(folded("largest differences", table, true));
}

// ------------------------------------------------------------------------------------------- tabs
let currentView = null;
function showTab(name) {
  document.querySelectorAll(".tab").forEach((tab) => { tab.hidden = tab.id !== "tab-" + name; });
  document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.tab === name));
  if (name === "graph") renderGraph(currentView);
}

async function main() {
  const view = currentView = await RD.rollout(rolloutId);
  const errors = document.getElementById("errors");
  if ((view.errors || []).length) {
    errors.hidden = false;
    errors.appendChild(el("h2", null, "this rollout did not validate"));
    for (const e of view.errors) errors.appendChild(pre(e, "error-line"));
  }
  if (!view.summary) { document.body.dataset.ready = "rollout"; return; }
  renderHeader(view);
  const tabs = document.getElementById("tabs");
  const names = ["tokens", "conversation", "graph", "calls", ...(view.crafter ? ["crafter"] : []), ...(view.audit ? ["audit"] : [])];
  for (const name of names) {
    const button = el("button", null, name);
    button.dataset.tab = name;
    button.addEventListener("click", () => showTab(name));
    tabs.appendChild(button);
  }
  renderConversation(view);
  renderCalls(view);
  if (view.crafter) renderCrafter(view);
  if (view.audit) renderAudit(view);
  showTab(params.get("tab") || "tokens");
  await renderTokens(view);
  document.body.dataset.ready = "rollout";
}

main().catch((error) => {
  const errors = document.getElementById("errors");
  errors.hidden = false;
  errors.appendChild(pre("error: " + error.message, "error-line"));
  document.body.dataset.ready = "error";
});
