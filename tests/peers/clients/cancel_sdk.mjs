// A tools/call the TypeScript MCP SDK client cancels, as the SDK sees it (issue 12, item 2).
//
// Usage: node cancel_sdk.mjs URL TOOL ARGUMENTS_JSON
//
// One session with the SDK's Client over StreamableHTTPClientTransport (from tests/peers/node's
// node_modules). Starts TOOL, prints `started` and waits for a line on stdin (the test sends it
// once the upstream has the call), then aborts the call: the SDK sends notifications/cancelled.
// It waits until the cancelled call's HTTP reply has ended, makes one `echo` call on the same
// session, and prints one JSON line:
// {"rejected": "<how the aborted call ended>", "echo": "<its text>", "errors": ["..."]}
// where `errors` are the client's onerror reports until then (the SDK reports there, among
// others, a response to a request it no longer waits for).
import { createRequire } from "node:module";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../node/package.json"));
const { Client } = await import(require.resolve("@modelcontextprotocol/sdk/client/index.js"));
const { StreamableHTTPClientTransport } = await import(
  require.resolve("@modelcontextprotocol/sdk/client/streamableHttp.js")
);

const [url, tool, args] = process.argv.slice(2);

// Resolves when the HTTP reply to the POST carrying TOOL's call has been read to its end.
let callReplyEnded;
const callReply = new Promise((resolve) => (callReplyEnded = resolve));
const watchingFetch = async (input, init) => {
  const response = await fetch(input, init);
  const isCall = init?.method === "POST" && String(init.body).includes(`"name":"${tool}"`);
  if (!isCall) {
    return response;
  }
  if (!response.body) {
    callReplyEnded();
    return response;
  }
  const [forClient, forWatch] = response.body.tee();
  (async () => {
    const reader = forWatch.getReader();
    try {
      while (!(await reader.read()).done) {}
    } finally {
      callReplyEnded();
    }
  })();
  return new Response(forClient, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
};

const errors = [];
const client = new Client({ name: "cancel-sdk", version: "0" });
client.onerror = (error) => errors.push(String(error));
await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: watchingFetch }));

const abort = new AbortController();
const call = client
  .callTool({ name: tool, arguments: JSON.parse(args) }, undefined, { signal: abort.signal })
  .then(
    () => "resolved",
    (error) => `rejected: ${error}`,
  );
console.log("started");
const lines = readline.createInterface({ input: process.stdin });
await new Promise((resolve) => lines.once("line", resolve));
abort.abort("cancelled by the test");
const rejected = await call;
await callReply;
const echo = await client.callTool({ name: "echo", arguments: { message: "after" } });
const seen = [...errors];
lines.close();
await client.close();
console.log(JSON.stringify({ rejected, echo: echo.content?.[0]?.text, errors: seen }));
