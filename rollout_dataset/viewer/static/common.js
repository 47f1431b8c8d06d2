// Shared by the viewer's pages: loading data (from the server's API, or from an export's data/*.js
// files when the page is opened from disk) and building DOM nodes. Rollout text is only ever set
// with textContent (nothing from a rollout becomes HTML), each piece bidi-isolated (`isolated`).
"use strict";

const RD = (() => {
  const meta = document.querySelector('meta[name="rd-mode"]');
  const exported = meta && meta.content === "export";
  const waiting = {};
  // an export's data files call this with their key and payload's JSON text (never an object
  // literal, which would take a "__proto__" key for the prototype)
  window.RD_DATA = (key, text) => {
    const done = waiting[key];
    delete waiting[key];
    if (done) done.resolve(JSON.parse(text));
  };

  function loadScript(key, file) {
    return new Promise((resolve, reject) => {
      waiting[key] = { resolve, reject };
      const tag = document.createElement("script");
      tag.src = "data/" + file;
      tag.onerror = () => { delete waiting[key]; reject(new Error("cannot load data/" + file)); };
      tag.onload = () => tag.remove();
      document.head.appendChild(tag);
    });
  }

  let exportIds = null;
  async function exportId(id) {
    if (!exportIds) exportIds = await loadScript("ids", "ids.js");
    if (!Object.hasOwn(exportIds, id)) throw new Error("no rollout " + JSON.stringify(id) + " in this export");
    return exportIds[id];
  }

  async function api(path, params) {
    const query = new URLSearchParams(params || {}).toString();
    const reply = await fetch("api/" + path + (query ? "?" + query : ""));
    const body = await reply.json();
    if (!reply.ok) throw new Error(body.error || reply.statusText);
    return body;
  }

  const WINDOW = 2048;
  return {
    exported,
    WINDOW,
    info: () => exported ? loadScript("info", "info.js") : api("info"),
    indexPage: (offset, limit) => exported
      ? (offset === 0 ? loadScript("index", "index.js") : Promise.resolve({ rows: [], done: true }))
      : api("index", { offset, limit }),
    rollout: async (id) => exported ? loadScript("rollout", "r" + (await exportId(id)) + ".js") : api("rollout", { id }),
    tokens: async (id, seq, start) => {
      if (!exported) return api("tokens", { id, seq, start, count: WINDOW });
      const page = await loadScript("t" + seq + "-" + start, "r" + (await exportId(id)) + "-s" + seq + "-w" + Math.floor(start / WINDOW) + ".js");
      if (page.error) throw new Error(page.error);  // a window the export could not read, as the server's 500
      return page;
    },
    rolloutHref: (id) => "rollout.html?id=" + encodeURIComponent(id),
  };
})();

// el("div", "class", "text", child...) -> an element; text goes in as textContent.
function el(tag, cls, text, ...children) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const child of children) if (child) node.appendChild(child);
  return node;
}

// rollout text as its own bidi-isolated piece: a direction override in it (U+202E) cannot reorder
// what the page draws after it. Every piece of rollout text the pages show goes through this (or,
// where only a string can go, `isolatedText`); a <bdi> adds no character, so copying is unchanged.
function isolated(text) { return el("bdi", null, text === null || text === undefined ? "" : String(text)); }

// the same for a place that takes a string, not a node (the window title, a graph label): the text
// between U+2068 FIRST STRONG ISOLATE and U+2069 POP DIRECTIONAL ISOLATE
function isolatedText(text) { return "\u2068" + String(text) + "\u2069"; }

// items (rollout text, each isolated; or nodes built of isolated pieces) with `separator` (page
// text) between them, in one span
function isolatedList(items, separator) {
  const node = (item) => item instanceof Node ? item : isolated(fmt(item));
  return el("span", null, null, ...(items || []).flatMap((item, k) => k ? [piece(separator), node(item)] : [node(item)]));
}

function fmt(value, digits) {
  if (value === null || value === undefined) return "n/a";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(digits === undefined ? 3 : digits);
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

// a two-column table of key -> value (values as text)
function kvTable(pairs, cls) {
  const table = el("table", "kv " + (cls || ""));
  for (const [key, value] of pairs) {
    const row = el("tr");
    row.appendChild(el("th", null, null, isolated(key)));  // an audit's summary names its own keys
    const cell = el("td");
    if (value instanceof Node) cell.appendChild(value);
    else if (value !== null && typeof value === "object") cell.append(...jsonPieces(value, ""));  // as fmt writes it
    else cell.appendChild(isolated(fmt(value)));
    row.appendChild(cell);
    table.appendChild(row);
  }
  return table;
}

function piece(part) { return part instanceof Node ? part : document.createTextNode(String(part)); }

// a block of rollout text (a message, a tool's arguments, a task statement), isolated as a whole
function pre(text, cls) { return el("pre", cls, null, isolated(text)); }

// a JSON value (rollout data: the tools a harness offered, a summary's metrics) as the text
// JSON.stringify(value, null, indent) gives, but with every key and string isolated, so an override
// in a tool's description cannot reorder the JSON after it on its line. Returns the pieces (text and
// nodes); copying them gives exactly JSON.stringify's text. indent "" gives the compact form.
function jsonPieces(value, indent) {
  const parts = [];
  const text = (t) => { if (typeof parts[parts.length - 1] === "string") parts[parts.length - 1] += t; else parts.push(t); };
  const string = (s) => { text('"'); parts.push(isolated(JSON.stringify(s).slice(1, -1))); text('"'); };
  const walk = (v, margin) => {
    if (typeof v === "string") { string(v); return; }
    if (v === null || typeof v !== "object") { text(JSON.stringify(v) === undefined ? "null" : JSON.stringify(v)); return; }
    const entries = Array.isArray(v) ? v.map((item) => [null, item]) : Object.entries(v).filter(([, item]) => item !== undefined);
    if (!entries.length) { text(Array.isArray(v) ? "[]" : "{}"); return; }
    const inner = margin + indent;
    const newline = indent ? "\n" : "";
    text(Array.isArray(v) ? "[" : "{");
    entries.forEach(([key, item], k) => {
      text((k ? "," : "") + newline + inner);
      if (key !== null) { string(key); text(indent ? ": " : ":"); }
      walk(item, inner);
    });
    text(newline + margin + (Array.isArray(v) ? "]" : "}"));
  };
  walk(value, "");
  return parts.map(piece);
}

// summary: text, or a list of pieces (text, or nodes such as `isolated` rollout text)
function folded(summary, body, open) {
  const details = el("details");
  if (open) details.open = true;
  details.appendChild(Array.isArray(summary) ? el("summary", null, null, ...summary.map(piece)) : el("summary", null, summary));
  details.appendChild(body);
  return details;
}
