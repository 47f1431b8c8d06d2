// The index page: every rollout as a row of a Tabulator table (sort, filter, page, group by group_id).
"use strict";

const PAGE = 500;

function textCell(cell) {
  // every cell is built as an isolated text node: a task id or model name is never parsed as HTML,
  // and a direction override in it stays in it
  const value = cell.getValue();
  return isolated(value === null || value === undefined ? "" : fmt(value));
}

function linkCell(cell) {
  const row = cell.getRow().getData();
  const link = el("a", "rollout-link", null, isolated(row.id));  // the badge after it stays in place
  link.href = RD.rolloutHref(row.id);
  if (row.error) link.appendChild(el("span", "badge bad", "invalid"));
  return link;
}

function mean(rows, key) {
  const values = rows.map((r) => r[key]).filter((v) => typeof v === "number");
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : null;
}

function groupHeader(value, count, rows) {
  const span = el("span", "group-header");
  span.appendChild(el("b", null, null, value === undefined || value === null ? piece("(no group)") : isolated(value)));
  span.appendChild(el("span", "muted", " — " + count + " rollout" + (count === 1 ? "" : "s") +
    ", mean reward " + fmt(mean(rows, "env_reward")) + ", after penalties " + fmt(mean(rows, "reward_after_penalties"))));
  return span;
}

const num = { sorter: "number", hozAlign: "right", formatter: textCell, headerFilter: "input", headerFilterPlaceholder: ">= …",
  headerFilterFunc: (term, value) => term === "" || (typeof value === "number" && value >= Number(term)) };
const txt = { formatter: textCell, headerFilter: "input" };
const COLUMNS = [
  { title: "rollout", field: "id", formatter: linkCell, headerFilter: "input", frozen: true },
  { title: "task", field: "task_id", ...txt },
  { title: "env", field: "env", ...txt },
  { title: "harness", field: "harness", ...txt },
  { title: "model", field: "model", ...txt },
  { title: "reward", field: "env_reward", ...num },
  { title: "after penalties", field: "reward_after_penalties", ...num },
  { title: "stepwise Σ", field: "stepwise_reward_sum", ...num },
  { title: "calls", field: "calls", ...num },
  { title: "agent turns", field: "agent_turns", ...num },
  { title: "tokens (longest seq.)", field: "tokens", ...num },
  { title: "trainable tokens", field: "trainable_tokens", ...num },
  { title: "capture", field: "capture_level", ...txt },
  { title: "trainable", field: "trainable", ...txt },
  { title: "findings", field: "findings", ...num },
  { title: "on-policy exact share", field: "continuity_share", ...num },
  { title: "stop", field: "stop_reason", ...txt },
  { title: "audit mean |Δ|", field: "audit_mean_abs_diff", ...num },
  { title: "audit max |Δ|", field: "audit_max_abs_diff", ...num },
  { title: "audit >1e-2", field: "audit_share_over_1e-2", ...num },
  { title: "audit KL k3", field: "audit_kl_k3", ...num },
  { title: "error", field: "error", ...txt },
];

async function main() {
  const status = document.getElementById("status");
  const info = await RD.info();
  document.getElementById("title").replaceChildren(isolated(info.name), piece(" (" + info.kind + ")"));
  document.title = isolatedText(info.name) + " — rollouts";
  const first = await RD.indexPage(0, PAGE);
  const table = new Tabulator("#table", {
    data: first.rows, columns: COLUMNS, layout: "fitDataStretch", index: "id",
    pagination: true, paginationSize: 100, paginationSizeSelector: [25, 100, 500],
    groupBy: "group_id", groupHeader, groupStartOpen: true, height: "75vh",
  });
  const count = document.getElementById("count");
  const showCount = () => { count.textContent = table.getDataCount("active") + " of " + table.getDataCount() + " rollouts"; };
  table.on("dataFiltered", showCount);
  const built = new Promise((resolve) => table.on("tableBuilt", resolve));
  built.then(() => {
    showCount();
    document.body.dataset.ready = "index";
  });
  // the rest, read page by page while the first page is already shown, then set in one go (one
  // regrouping and one render, not one per page)
  const rows = first.rows.slice();
  let done = first.done;
  let stopped = first.error || null;  // a shard the scan could not read (the rows before it are listed)
  while (!done) {
    status.textContent = "loading… " + rows.length + " rollouts read";
    const page = await RD.indexPage(rows.length, PAGE * 10);
    rows.push(...page.rows);
    done = page.done || page.rows.length === 0;
    stopped = page.error || stopped;
  }
  await built;
  if (rows.length > first.rows.length) await table.replaceData(rows);
  status.replaceChildren(...(stopped ? [piece("index stopped: "), isolated(stopped)] : []));
  showCount();
  document.body.dataset.loaded = String(rows.length);

  document.getElementById("filter").addEventListener("input", (event) => {
    const term = event.target.value.toLowerCase();
    if (!term) { table.clearFilter(); return; }
    table.setFilter((row) => ["id", "task_id", "env", "harness", "model", "stop_reason", "group_id", "capture_level"]
      .some((key) => row[key] !== null && row[key] !== undefined && String(row[key]).toLowerCase().includes(term)));
  });
  document.getElementById("group").addEventListener("change", (event) => {
    table.setGroupBy(event.target.checked ? "group_id" : false);
  });
}

main().catch((error) => {
  document.getElementById("status").textContent = "error: " + error.message;
  document.body.dataset.ready = "error";
});
