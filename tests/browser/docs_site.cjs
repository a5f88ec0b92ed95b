// Drives rivc's docs site in Debian's chromium with playwright-core (npm): load, search, open a
// node, follow a column's lineage. Prints what it saw as JSON for tests/integration/test_docs_site.py
// and bench/docs_bench.py. Usage: node docs_site.cjs /path/to/index.html
"use strict";
const { chromium } = require("playwright-core");

async function main(index) {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = await browser.newPage();
    const out = {};
    await page.goto("file://" + index);
    await page.waitForSelector("body[data-ready]");
    out.ready_ms = Number(await page.getAttribute("body", "data-ready"));
    out.listed = await page.$$eval("#list a", (as) => as.length);
    const first = process.argv[3];
    if (!first) {  // the bench: load only
      return out;
    }
    await page.fill("#search", first.slice(0, -2));
    out.hits = await page.$$eval("#list a", (as) => as.map((a) => a.dataset.id));
    await page.click(`#list a[data-id="model:${first}"]`);
    await page.waitForFunction((name) => document.querySelector("article h1")?.textContent === name, first);
    out.title = await page.textContent("article h1");
    out.columns = await page.$$eval("#columns td:first-child a", (as) => as.map((a) => a.textContent));
    out.dag = await page.$$eval("#dag text", (ts) => ts.map((t) => t.textContent));
    await page.click(`#columns a:text-is("${process.argv[4]}")`);
    await page.waitForSelector("#lineage");
    out.lineage = await page.$$eval("#lineage li", (lis) => lis.map((li) => li.firstChild.textContent + li.children[0].textContent + " " + li.children[1].textContent));
    await page.click(`#lineage a:text-is("${process.argv[5]}")`);
    await page.waitForFunction((name) => document.querySelector("article h1").textContent === name, process.argv[5].split(".")[0]);
    out.followed = await page.textContent("article h1");
    out.hash = decodeURIComponent(new URL(page.url()).hash);
    return out;
  } finally {
    await browser.close();
  }
}

main(process.argv[2]).then(
  (out) => console.log(JSON.stringify(out)),
  (err) => { console.error(String(err)); process.exit(1); }
);
