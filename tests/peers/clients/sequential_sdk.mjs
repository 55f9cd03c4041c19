// Sequential tools/call latency as the TypeScript MCP SDK client sees it (issue 12, item 0).
//
// Usage: node sequential_sdk.mjs URL CALLS [TOOL] [ARGUMENTS_JSON]
//
// One session with the SDK's Client over StreamableHTTPClientTransport (from tests/peers/node's
// node_modules), then CALLS tools/call one after the other. Prints one JSON line:
// {"calls": N, "median_ms": .., "p90_ms": .., "max_ms": ..}. Exits non-zero on any error.
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../node/package.json"));
const { Client } = await import(require.resolve("@modelcontextprotocol/sdk/client/index.js"));
const { StreamableHTTPClientTransport } = await import(
  require.resolve("@modelcontextprotocol/sdk/client/streamableHttp.js")
);

const [url, calls, tool = "echo", args] = process.argv.slice(2);
const client = new Client({ name: "sequential-sdk", version: "0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const took = [];
for (let n = 0; n < Number(calls); n++) {
  const started = performance.now();
  await client.callTool({ name: tool, arguments: args ? JSON.parse(args) : { message: `call ${n}` } });
  took.push(performance.now() - started);
}
await client.close();
took.sort((a, b) => a - b);
const median = took.length % 2 ? took[(took.length - 1) / 2] : (took[took.length / 2 - 1] + took[took.length / 2]) / 2;
console.log(JSON.stringify({ calls: took.length, median_ms: median, p90_ms: took[Math.floor(took.length * 0.9)], max_ms: took[took.length - 1] }));
