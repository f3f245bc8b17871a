// perfwatch dashboard: fetches /api/... and follows /events (server-sent events).
// Data from the store (test names, run ids, commits) is inserted as text, never as HTML.
"use strict";

const PLOT_CONFIG = { responsive: true, displaylogo: false };
// Characters of a commit shown: as many as the verdicts' messages show.
const COMMIT_CHARS = 12;

function $(id) {
  return document.getElementById(id);
}

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  if (!response.ok) {
    const text = await response.text();
    throw new Error(`${url}: HTTP ${response.status} ${text}`);
  }
  return response.json();
}

function showError(error) {
  const box = $("page-error");
  box.textContent = String(error.message || error);
  box.hidden = false;
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function linkCell(row, text, href) {
  const td = document.createElement("td");
  const a = document.createElement("a");
  a.href = href;
  a.textContent = text;
  td.appendChild(a);
  row.appendChild(td);
  return td;
}

function badge(row, status) {
  const td = cell(row, "");
  const span = document.createElement("span");
  span.className = `badge badge-${status}`;
  span.textContent = status;
  td.appendChild(span);
  return td;
}

function number(value, digits = 6) {
  if (value === null || value === undefined || Number.isNaN(value)) return "";
  return Number(value).toPrecision(digits).replace(/\.?0+(e|$)/, "$1");
}

function percent(value) {
  if (value === null || value === undefined) return "";
  return `${value >= 0 ? "+" : ""}${Number(value).toFixed(1)}%`;
}

function attributesText(attributes) {
  return Object.entries(attributes || {})
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");
}

function seriesHref(key) {
  return `/series?key=${encodeURIComponent(key)}`;
}

// A table body with no rows says why in one full-width row.
function emptyRow(tbody, message) {
  if (tbody.children.length) return;
  const tr = document.createElement("tr");
  tr.className = "empty";
  const td = cell(tr, message, "muted");
  td.colSpan = tbody.closest("table").querySelectorAll("thead th").length;
  tbody.appendChild(tr);
}

function plot(id, figure) {
  return Plotly.react($(id), figure.data, figure.layout, PLOT_CONFIG);
}

function fillSelect(select, values, selected, labelOf) {
  select.replaceChildren();
  for (const value of values) {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = labelOf ? labelOf(value) : value;
    option.selected = value === selected;
    select.appendChild(option);
  }
}

function setQuery(params) {
  const url = new URL(window.location.href);
  for (const [name, value] of Object.entries(params)) {
    if (value) url.searchParams.set(name, value);
    else url.searchParams.delete(name);
  }
  window.history.replaceState(null, "", url);
}

// Each select writes its value into `choice` (clearing the choices `resets` names
// for it), mirrors the choices in the URL and reloads the view.
function bindChoices(choice, selects, load, resets = {}) {
  for (const [id, name] of Object.entries(selects)) {
    $(id).addEventListener("change", (e) => {
      choice[name] = e.target.value;
      for (const cleared of resets[name] || []) choice[cleared] = "";
      setQuery(choice);
      load().catch(showError);
    });
  }
}

// --- live updates ------------------------------------------------------------------------

const liveHandlers = [];

function onVerdict(handler) {
  liveHandlers.push(handler);
}

function followEvents() {
  const status = $("live-status");
  const source = new EventSource("/events");
  source.addEventListener("hello", () => {
    status.textContent = "live";
    status.className = "live live-on";
  });
  source.addEventListener("verdict", (message) => {
    const event = JSON.parse(message.data);
    for (const handler of liveHandlers) handler(event);
  });
  source.onerror = () => {
    status.textContent = "reconnecting…";
    status.className = "live live-connecting";
  };
}

// --- sortable, searchable tables -----------------------------------------------------------

function makeSortable(table, onSort) {
  for (const th of table.querySelectorAll("th[data-sort]")) {
    th.tabIndex = 0;
    const activate = () => {
      const ascending = th.dataset.order !== "asc";
      for (const other of table.querySelectorAll("th[data-sort]")) delete other.dataset.order;
      th.dataset.order = ascending ? "asc" : "desc";
      onSort(th.dataset.sort, th.dataset.type === "number", ascending);
    };
    th.addEventListener("click", activate);
    th.addEventListener("keydown", (e) => {
      if (e.key === "Enter") activate();
    });
  }
}

function compare(a, b, numeric) {
  if (numeric) {
    const x = a === null || a === undefined ? -Infinity : a;
    const y = b === null || b === undefined ? -Infinity : b;
    return x - y;
  }
  return String(a ?? "").localeCompare(String(b ?? ""));
}

// --- overview ----------------------------------------------------------------------------

const STATUS_RANK = { regression: 0, changed: 1, improvement: 2, fixed: 3, stable: 4 };

function sortValue(summary, column) {
  switch (column) {
    case "status":
      return STATUS_RANK[summary.status] ?? 9;
    case "attributes":
      return attributesText(summary.attributes);
    case "latest":
      return summary.latest ? summary.latest.value : null;
    case "change":
      return summary.status_episode ? summary.status_episode.forward_change_percent : null;
    case "episode":
      return summary.status_episode ? summary.status_episode.text : "";
    case "time":
      return summary.latest ? summary.latest.timestamp : null;
    default:
      return summary[column];
  }
}

function searchText(summary) {
  return [summary.status, summary.test, summary.metric, attributesText(summary.attributes)]
    .join(" ")
    .toLowerCase();
}

async function initOverview() {
  const series = new Map();
  let sortColumn = "status";
  let sortNumeric = false;
  let ascending = true;
  const tbody = $("series-table").querySelector("tbody");

  function renderSeries(highlightKey) {
    const needle = $("series-search").value.trim().toLowerCase();
    const rows = [...series.values()].filter((s) => !needle || searchText(s).includes(needle));
    rows.sort((a, b) => {
      const order = compare(sortValue(a, sortColumn), sortValue(b, sortColumn), sortNumeric);
      const tie = compare(a.key, b.key, false);
      return (ascending ? order : -order) || tie;
    });
    tbody.replaceChildren();
    for (const s of rows) {
      const tr = document.createElement("tr");
      tr.dataset.key = s.key;
      tr.dataset.status = s.status;
      if (s.key === highlightKey) tr.classList.add("fresh");
      badge(tr, s.status);
      linkCell(tr, s.test, seriesHref(s.key));
      linkCell(tr, s.metric, seriesHref(s.key));
      cell(tr, attributesText(s.attributes));
      cell(tr, s.runs, "num");
      cell(tr, s.latest ? `${number(s.latest.value)}${s.unit ? ` ${s.unit}` : ""}` : "", "num");
      const episode = s.status_episode;
      cell(tr, episode ? percent(episode.forward_change_percent) : "", "num");
      cell(tr, episode ? episode.text : "");
      cell(tr, s.latest ? s.latest.time || "" : "");
      tbody.appendChild(tr);
    }
    emptyRow(
      tbody,
      series.size
        ? "No series matches the search."
        : "No series yet: publish records (perfwatch publish) to a running perfwatch serve.",
    );
    $("series-count").textContent = `${rows.length} of ${series.size} series`;
  }

  makeSortable($("series-table"), (column, numeric, asc) => {
    sortColumn = column;
    sortNumeric = numeric;
    ascending = asc;
    renderSeries();
  });
  $("series-search").addEventListener("input", () => renderSeries());

  const feed = $("verdict-table").querySelector("tbody");
  let oldestSeq = null;

  function verdictRow(item) {
    const f = item.facts;
    const tr = document.createElement("tr");
    tr.dataset.verdictId = item.verdict_id;
    tr.dataset.kind = item.kind;
    cell(tr, f.emitted_at);
    const label = cell(tr, f.label);
    label.className = `label label-${f.label.toLowerCase()}`;
    if (item.series_key) linkCell(tr, f.test, seriesHref(item.series_key));
    else cell(tr, f.test);
    cell(tr, f.metric);
    cell(tr, f.commit, "mono");
    cell(tr, f.kind, "muted");
    return tr;
  }

  function filterFeed() {
    const needle = $("verdict-search").value.trim().toLowerCase();
    for (const tr of feed.querySelectorAll("tr.empty")) tr.remove();
    for (const tr of feed.children) {
      tr.hidden = needle !== "" && !tr.textContent.toLowerCase().includes(needle);
    }
    emptyRow(feed, "No verdicts yet.");
  }
  $("verdict-search").addEventListener("input", filterFeed);

  async function loadVerdicts() {
    const query = oldestSeq === null ? "" : `&before=${oldestSeq}`;
    const { verdicts } = await getJSON(`/api/verdicts?limit=100${query}`);
    for (const item of verdicts) {
      if (feed.querySelector(`tr[data-verdict-id="${item.verdict_id}"]`)) continue;
      feed.appendChild(verdictRow(item));
      oldestSeq = item.seq;
    }
    $("verdict-more").hidden = verdicts.length < 100;
    filterFeed();
  }
  $("verdict-more").addEventListener("click", () => loadVerdicts().catch(showError));

  onVerdict((event) => {
    if (!feed.querySelector(`tr[data-verdict-id="${event.item.verdict_id}"]`)) {
      const tr = verdictRow(event.item);
      tr.classList.add("fresh");
      feed.prepend(tr);
      filterFeed();
    }
    if (event.series) {
      series.set(event.series.key, event.series);
      renderSeries(event.series.key);
    }
  });

  const { series: list } = await getJSON("/api/series");
  for (const s of list) series.set(s.key, s);
  renderSeries();
  await loadVerdicts();
}

// --- series view ---------------------------------------------------------------------------

async function initSeries() {
  const params = new URLSearchParams(window.location.search);
  const key = params.get("key");
  if (!key) throw new Error("no series selected: open a series from the overview");
  const choice = { key, x: params.get("x") || "run" };
  $("series-x").value = choice.x;

  async function load() {
    const query = new URLSearchParams({ key, x: choice.x });
    const { series, figure } = await getJSON(`/api/series/detail?${query}`);
    $("page-heading").textContent = `${series.test} · ${series.metric}`;
    const attributes = attributesText(series.attributes);
    const facts = $("series-facts");
    facts.replaceChildren();
    const status = document.createElement("span");
    status.className = `badge badge-${series.status}`;
    status.textContent = series.status;
    facts.append(
      status,
      (series.status_episode ? ` ${series.status_episode.text} ·` : "") +
        ` ${series.runs} runs · ${series.change_points} change point(s)` +
        (attributes ? ` · ${attributes}` : ""),
    );
    await plot("series-chart", figure);

    const cps = $("changepoint-table").querySelector("tbody");
    cps.replaceChildren();
    for (const cp of series.change_point_list) {
      const tr = document.createElement("tr");
      tr.dataset.index = cp.index;
      cell(tr, cp.run_id);
      cell(tr, (cp.commit || "").slice(0, COMMIT_CHARS), "mono");
      cell(tr, cp.time);
      cell(tr, cp.direction, `label label-${cp.direction}`);
      cell(tr, percent(cp.forward_change_percent), "num");
      cell(tr, number(cp.mean_before), "num");
      cell(tr, number(cp.mean_after), "num");
      cell(tr, Number(cp.pvalue).toPrecision(2), "num");
      cps.appendChild(tr);
    }
    const p = series.parameters;
    emptyRow(
      cps,
      `No change points in ${series.runs} runs (window ${p.window_len}, p ≤ ${p.max_pvalue}).`,
    );
    $("changepoint-source").textContent =
      `Computed from the ${series.runs} stored runs as perfwatch analyze computes them ` +
      `(window ${p.window_len}, max p-value ${p.max_pvalue}, min magnitude ${p.min_magnitude}` +
      `${p.compat ? `, compat ${p.compat}` : ""}).`;

    const episodes = $("episode-table").querySelector("tbody");
    episodes.replaceChildren();
    for (const e of series.episodes) {
      const tr = document.createElement("tr");
      tr.dataset.index = e.index;
      cell(tr, e.kind, `label label-${e.kind}`);
      cell(tr, e.run_id);
      cell(tr, (e.commit || "").slice(0, COMMIT_CHARS), "mono");
      cell(tr, percent(e.forward_change_percent), "num");
      cell(tr, e.fixed_run_id === null ? (e.open ? "open" : "") : `fixed at run ${e.fixed_run_id}`);
      cell(tr, e.text);
      episodes.appendChild(tr);
    }
    emptyRow(episodes, "No regression, improvement or other change.");

    const segments = $("segment-table").querySelector("tbody");
    segments.replaceChildren();
    for (const s of series.segments) {
      const tr = document.createElement("tr");
      cell(tr, `${s.first_run_id}–${s.last_run_id}`);
      cell(tr, number(s.mean), "num");
      cell(tr, number(s.stddev, 3), "num");
      segments.appendChild(tr);
    }

    const history = $("history-table").querySelector("tbody");
    history.replaceChildren();
    for (const item of series.verdicts) {
      const f = item.facts;
      const tr = document.createElement("tr");
      tr.dataset.verdictId = item.verdict_id;
      cell(tr, f.emitted_at);
      cell(tr, f.label, `label label-${f.label.toLowerCase()}`);
      cell(tr, f.kind, "muted");
      cell(tr, f.commit, "mono");
      cell(tr, f.run_id);
      history.appendChild(tr);
    }
    emptyRow(history, "No verdict was published for this series.");
  }

  $("series-x").addEventListener("change", (e) => {
    choice.x = e.target.value;
    setQuery(choice);
    load().catch(showError);
  });
  onVerdict((event) => {
    if (event.item.series_key === key) load().catch(showError);
  });
  await load();
}

// --- counter-check view ------------------------------------------------------------------

// A run as a picker names it: its own date and commit, when the store has them.
function runWhen(run) {
  if (!run) return "run date not stored";
  const commit = run.commit ? ` · commit ${run.commit.slice(0, COMMIT_CHARS)}` : "";
  return `${run.time || ""}${commit}`;
}

// A cluster's error (a fraction) and corrected p-value as the table shows them.
function percentCell(value) {
  return value === null || value === undefined ? "" : `${(100 * value).toFixed(1)}%`;
}

function pvalueCell(value) {
  return value === null || value === undefined ? "" : Number(value).toPrecision(2);
}

async function initCounters() {
  const params = new URLSearchParams(window.location.search);
  const choice = { test: params.get("test") || "", verdict: params.get("verdict") || "" };

  async function load() {
    const query = new URLSearchParams(Object.entries(choice).filter(([, v]) => v));
    const data = await getJSON(`/api/counters?${query}`);
    const all = choice.test ? (await getJSON("/api/counters")).checks : data.checks;
    const tests = [...new Set(all.map((c) => c.facts.test))].sort();
    fillSelect($("counter-test"), ["", ...tests], choice.test, (t) => t || "all tests");
    fillSelect(
      $("counter-verdict"),
      data.checks.map((c) => c.verdict_id),
      data.selected ? data.selected.verdict_id : "",
      (id) => {
        const c = data.checks.find((x) => x.verdict_id === id);
        return `${c.facts.test} · run ${c.facts.run_id} · ${runWhen(c.run)} · ${c.facts.label}`;
      },
    );
    const facts = $("counter-facts");
    const tbody = $("cluster-table").querySelector("tbody");
    tbody.replaceChildren();
    $("counter-errors").closest("section").hidden = !data.selected;
    if (!data.selected) {
      facts.textContent = "No counter-check verdicts yet.";
      return;
    }
    const check = data.selected.verdict.counter_check;
    facts.textContent = data.header;
    const unjudged = check.status === "insufficient_baseline";
    // one baseline run: its "usual" error is the model's error on the run it was fitted on
    const inSample = (check.baseline || {}).runs === 1;
    await plot("counter-errors", data.figures.errors);
    await plot("counter-means", data.figures.means);
    for (const c of check.clusters) {
      const tr = document.createElement("tr");
      tr.dataset.cluster = c.cluster;
      if (c.flagged) tr.classList.add("flagged");
      // the workload models: their members are the workload counters they are fitted on
      cell(tr, c.workload ? "workload" : c.cluster, "num");
      cell(tr, (c.members || []).join(", "));
      cell(tr, c.dependent);
      cell(tr, c.model);
      cell(tr, percentCell(c.error), "num");
      const usual = percentCell(c.good_run_error);
      cell(tr, inSample && usual ? `${usual} in-sample` : usual, "num");
      cell(tr, pvalueCell(c.familywise_pvalue), "num");
      cell(tr, unjudged || c.excess_error === null ? "not judged" : c.flagged ? "yes" : "no");
      cell(tr, number(c.baseline_mean), "num");
      cell(tr, number(c.target_mean), "num");
      cell(
        tr,
        Object.entries(c.coefficients || {})
          .map(([name, value]) => `${name}: ${number(value, 4)}`)
          .join(", "),
      );
      tbody.appendChild(tr);
    }
  }

  bindChoices(choice, { "counter-test": "test", "counter-verdict": "verdict" }, load, {
    test: ["verdict"],
  });
  onVerdict((event) => {
    if (event.item.kind.startsWith("counter_") && !choice.verdict) load().catch(showError);
  });
  await load();
}

// --- run-or-skip view ----------------------------------------------------------------------

async function initInputs() {
  const params = new URLSearchParams(window.location.search);
  const choice = {
    test: params.get("test") || "",
    verdict: params.get("verdict") || "",
    x: params.get("x") || "",
    y: params.get("y") || "",
  };

  async function load() {
    const query = new URLSearchParams(Object.entries(choice).filter(([, v]) => v));
    const data = await getJSON(`/api/inputs?${query}`);
    fillSelect($("inputs-test"), data.tests, data.test);
    fillSelect(
      $("inputs-verdict"),
      data.recommendations.map((r) => r.verdict_id),
      data.selected ? data.selected.verdict_id : "",
      (id) => {
        const r = data.recommendations.find((x) => x.verdict_id === id);
        return `run ${r.facts.run_id} · ${r.facts.label} (${r.facts.emitted_at})`;
      },
    );
    fillSelect($("inputs-x"), data.attributes, data.x);
    fillSelect($("inputs-y"), data.attributes, data.y);
    const facts = $("inputs-facts");
    const votes = $("vote-table").querySelector("tbody");
    const clusters = $("input-cluster-table").querySelector("tbody");
    const judged = $("cluster-change-table").querySelector("tbody");
    votes.replaceChildren();
    clusters.replaceChildren();
    judged.replaceChildren();
    $("inputs-chart").closest("section").hidden = !data.selected;
    $("shift-chart").closest("section").hidden = !data.selected;
    if (!data.selected) {
      facts.textContent = "No run-or-skip recommendations yet.";
      emptyRow(judged, "No run-or-skip recommendations yet.");
      emptyRow(votes, "No run-or-skip recommendations yet.");
      return;
    }
    const advice = data.selected.verdict.recommendation;
    facts.textContent =
      (advice.summary ||
        `${advice.decision.toUpperCase()}: ${Math.round(100 * advice.run_share)}% of ` +
          `${data.votes.length} sampled inputs vote run`) +
      (advice.advice ? ` — ${advice.advice.message}` : "");
    await plot("inputs-chart", data.figure);
    await plot("shift-chart", data.sample_figures.shift);
    await plot("cluster-change-chart", data.sample_figures.clusters);
    const interval = (row) =>
      row.change_low === null || row.change_high === null
        ? "none"
        : `[${percent(100 * row.change_low)}, ${percent(100 * row.change_high)}]`;
    const change = (row) => (row.change === null ? "" : percent(100 * row.change));
    for (const c of data.shifts.clusters) {
      const tr = document.createElement("tr");
      tr.dataset.cluster = c.label;
      cell(tr, c.name);
      cell(tr, c.decision, `label label-${c.decision}`);
      cell(tr, c.verdict);
      cell(tr, `${c.run_votes} / ${c.judged}`, "num");
      cell(tr, change(c), "num");
      cell(tr, c.change === null ? "" : interval(c), "num");
      cell(tr, c.inputs.join(", "));
      judged.appendChild(tr);
    }
    emptyRow(
      judged,
      data.shifts.rule === "paper"
        ? "The paper's rule judges the sampled inputs together: no per-cluster decision."
        : data.shifts.reason || "No cluster was judged.",
    );
    const shifted = Object.fromEntries(data.shifts.inputs.map((row) => [row.input_id, row]));
    for (const v of data.votes) {
      const row = shifted[v.input_id];
      const tr = document.createElement("tr");
      tr.dataset.input = v.input_id;
      tr.dataset.decision = v.decision;
      if (row && row.driver) tr.classList.add("driver");
      cell(tr, v.input_id);
      cell(tr, v.label);
      cell(tr, v.group, "num");
      cell(tr, v.decision, `label label-${v.decision}`);
      cell(tr, row ? number(row.old_s, 4) : "", "num");
      cell(tr, row ? number(row.new_s, 4) : "", "num");
      cell(tr, row ? change(row) : "", "num");
      cell(tr, row && row.change !== null ? interval(row) : "", "num");
      cell(tr, String(v.time_check));
      cell(tr, v.gradient_check === null ? "not needed" : String(v.gradient_check));
      cell(tr, v.reason);
      votes.appendChild(tr);
    }
    for (const c of data.clusters) {
      const tr = document.createElement("tr");
      cell(tr, c.label < 0 ? "noise" : c.label, "num");
      cell(tr, c.members.length, "num");
      cell(tr, c.members.join(", "));
      clusters.appendChild(tr);
    }
  }

  bindChoices(
    choice,
    { "inputs-test": "test", "inputs-verdict": "verdict", "inputs-x": "x", "inputs-y": "y" },
    load,
    { test: ["verdict"] },
  );
  onVerdict((event) => {
    if (event.item.kind === "recommendation" && !choice.verdict) load().catch(showError);
  });
  await load();
}

// --- time and memory per test --------------------------------------------------------------

async function initResources() {
  const params = new URLSearchParams(window.location.search);
  const choice = { time_metric: params.get("time_metric") || "", memory_metric: params.get("memory_metric") || "" };

  async function load() {
    const query = new URLSearchParams(Object.entries(choice).filter(([, v]) => v));
    const data = await getJSON(`/api/resources?${query}`);
    fillSelect($("time-metric"), data.metrics, data.time_metric);
    fillSelect($("memory-metric"), data.metrics, data.memory_metric);
    $("resources-facts").textContent = data.note || "";
    await plot("time-chart", data.figures.time);
    await plot("memory-chart", data.figures.memory);
    await plot("total-chart", data.figures.total);
  }
  bindChoices(choice, { "time-metric": "time_metric", "memory-metric": "memory_metric" }, load);
  onVerdict(() => load().catch(showError));
  await load();
}

// --- start ---------------------------------------------------------------------------------

const PAGES = {
  overview: initOverview,
  series: initSeries,
  counters: initCounters,
  inputs: initInputs,
  resources: initResources,
};

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  const nav = document.querySelector(`nav a[data-nav="${page}"]`);
  if (nav) nav.classList.add("active");
  followEvents();
  PAGES[page]()
    .then(() => {
      document.body.dataset.ready = "true";
    })
    .catch((error) => {
      document.body.dataset.ready = "error";
      showError(error);
    });
});
