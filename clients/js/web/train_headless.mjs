#!/usr/bin/env node
// Open the web game in headless Chromium (the system's, through puppeteer-core: no browser download)
// and wait until the page's training ends; print its window.rlinks as JSON. tests/test_web_game.py runs it.
//
//   node web/train_headless.mjs --chromium /usr/bin/chromium --url "http://127.0.0.1:8000/web/?address=ws://..."

import { parseArgs } from "node:util";

import puppeteer from "puppeteer-core";

const { values: args } = parseArgs({
  options: { chromium: { type: "string" }, url: { type: "string" }, timeout: { type: "string", default: "600" } },
});
const ENDED = new Set(["training_ended", "finished", "stopped", "error"]);

const browser = await puppeteer.launch({
  executablePath: args.chromium,
  headless: true,
  // --no-sandbox: the tests may run as root, where Chromium's sandbox refuses to start.
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
let status = null;
const console_ = [];
try {
  const page = await browser.newPage();
  page.on("console", (message) => console_.push(`${message.type()}: ${message.text()}`));
  page.on("pageerror", (error) => console_.push(`pageerror: ${error.message}`));
  await page.goto(args.url, { waitUntil: "load" });
  const deadline = Date.now() + 1000 * Number(args.timeout);
  for (;;) {
    status = await page.evaluate(() => window.rlinks ?? null);
    if ((status && ENDED.has(status.state)) || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify({ status, console: console_.slice(-50) }));
process.exitCode = status?.state === "training_ended" ? 0 : 1;
