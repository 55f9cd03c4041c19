// Preload for MCP servers under test: any server.listen() without a host binds 127.0.0.1
// instead of every interface, so tests never listen beyond loopback.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    const port = Number(args[0]);
    const rest = args.slice(1).filter((a) => typeof a !== "string");
    return listen.call(this, port, "127.0.0.1", ...rest.filter((a) => typeof a !== "number"));
  }
  if (args[0] && typeof args[0] === "object" && !args[0].host && !args[0].path) {
    return listen.call(this, { ...args[0], host: "127.0.0.1" }, ...args.slice(1));
  }
  return listen.apply(this, args);
};
