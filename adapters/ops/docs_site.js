// rivc docs: the project's nodes from the JSON embedded in the page (adapters/ops/docs.py).
// Routes live in the URL's hash: #node=<id> and #node=<id>&column=<name>.
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
const byId = new Map(data.nodes.map((n) => [n.id, n]));
const list = document.getElementById("list");
const search = document.getElementById("search");
const article = document.getElementById("node");
document.getElementById("project").textContent = data.project;
document.title = data.project + " · rivc docs";

// each column's readers: "node|column" -> [[node, column, how]]
const made = new Map();
for (const n of data.nodes) {
  for (const [column, origins] of Object.entries(n.lineage)) {
    for (const [origin, name, how] of origins) {
      const key = origin + "|" + name;
      if (!made.has(key)) made.set(key, []);
      made.get(key).push([n.id, column, how]);
    }
  }
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

function label(id) {
  const n = byId.get(id);
  return n && (n.kind === "model" || n.kind === "seed") ? n.name : id;
}

function href(id, column) {
  return "#node=" + encodeURIComponent(id) + (column ? "&column=" + encodeURIComponent(column) : "");
}

function link(id, column) {
  return el("a", { href: href(id, column) }, column ? label(id) + "." + column : label(id));
}

function renderList(query) {
  const q = query.trim().toLowerCase();
  const hits = data.nodes.filter(
    (n) =>
      !q ||
      n.id.toLowerCase().includes(q) ||
      n.description.toLowerCase().includes(q) ||
      n.columns.some((c) => c.name.toLowerCase().includes(q))
  );
  list.replaceChildren(
    ...hits.slice(0, 1000).map((n) =>
      el("a", { href: href(n.id), "data-id": n.id }, n.name, " ", el("small", {}, n.kind))
    )
  );
}

function dag(node) {
  // the node's neighbourhood: parents, the node, children, as three columns of an SVG
  const cols = [node.parents, [node.id], node.children];
  const rows = Math.max(...cols.map((c) => c.length), 1);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", 900);
  svg.setAttribute("height", rows * 24 + 10);
  svg.setAttribute("id", "dag");
  const at = (col, i) => [10 + col * 300, 20 + i * 24];
  cols.forEach((ids, col) =>
    ids.forEach((id, i) => {
      const [x, y] = at(col, i);
      if (col !== 1) {
        const [mx, my] = at(1, 0);
        const line = document.createElementNS(ns, "line");
        const [x1, y1, x2, y2] = col === 0 ? [x + 250, y - 4, mx, my - 4] : [mx + 250, my - 4, x, y - 4];
        for (const [k, v] of Object.entries({ x1, y1, x2, y2, stroke: "#aab" })) line.setAttribute(k, v);
        svg.append(line);
      }
      const a = document.createElementNS(ns, "a");
      a.setAttribute("href", href(id));
      const text = document.createElementNS(ns, "text");
      text.setAttribute("x", x);
      text.setAttribute("y", y);
      text.textContent = label(id);
      a.append(text);
      svg.append(a);
    })
  );
  return svg;
}

function upstream(id, column, depth) {
  const node = byId.get(id);
  const origins = (node && node.lineage[column]) || [];
  return el(
    "ul",
    {},
    ...origins.map(([o, c, how]) =>
      el("li", {}, "← ", link(o, c), " ", el("small", {}, how), depth < 50 ? upstream(o, c, depth + 1) : "")
    )
  );
}

function downstream(id, column, depth) {
  const items = [];
  for (const child of (byId.get(id) || { children: [] }).children) {
    const n = byId.get(child);
    if (n.kind === "sink") items.push(el("li", {}, "→ ", link(child), " ", el("small", {}, "delivered")));
    if (n.kind === "test" && n.column === column) items.push(el("li", {}, "→ ", link(child), " ", el("small", {}, "tested")));
  }
  for (const [n, c, how] of made.get(id + "|" + column) || []) {
    items.push(el("li", {}, "→ ", link(n, c), " ", el("small", {}, how), depth < 50 ? downstream(n, c, depth + 1) : ""));
  }
  return el("ul", {}, ...items);
}

function show(id, column) {
  const node = byId.get(id);
  if (!node) {
    article.replaceChildren(el("p", {}, "No node " + id + "."));
    return;
  }
  for (const a of list.querySelectorAll("a.on")) a.classList.remove("on");
  const mine = list.querySelector(`a[data-id="${CSS.escape(id)}"]`);
  if (mine) mine.classList.add("on");
  const parts = [
    el("h1", {}, node.name),
    el("small", {}, [node.kind, node.materialized, node.path, ...node.tags.map((t) => "#" + t)].filter(Boolean).join(" · ")),
  ];
  if (node.description) parts.push(el("p", {}, node.description));
  parts.push(el("h2", {}, "In the DAG"), dag(node));
  if (node.columns.length) {
    parts.push(
      el("h2", {}, "Columns"),
      el(
        "table",
        { id: "columns" },
        el("tr", {}, el("th", {}, "column"), el("th", {}, "type"), el("th", {}, "description")),
        ...node.columns.map((c) =>
          el("tr", {}, el("td", {}, el("a", { href: href(id, c.name) }, c.name)), el("td", {}, c.type || "?"), el("td", {}, c.description))
        )
      )
    );
  }
  if (column) {
    parts.push(
      el("section", { id: "lineage", class: "lineage" }, el("h2", {}, "Lineage of " + node.name + "." + column), upstream(id, column, 1), downstream(id, column, 1))
    );
  }
  if (node.tests.length) parts.push(el("h2", {}, "Tests"), el("ul", {}, ...node.tests.map((t) => el("li", {}, link(t)))));
  if (node.sql) parts.push(el("h2", {}, "SQL"), el("pre", {}, node.sql));
  article.replaceChildren(...parts);
  if (column) document.getElementById("lineage").scrollIntoView();
}

function route() {
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.get("node")) show(params.get("node"), params.get("column"));
}

search.addEventListener("input", () => renderList(search.value));
window.addEventListener("hashchange", route);
renderList("");
route();
document.body.dataset.ready = String(Math.round(performance.now()));
