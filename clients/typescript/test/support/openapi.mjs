// openapi.yaml's operations, read from the file itself: the path, method and operationId
// of each (the document is generated, so its layout is regular: paths at two spaces,
// methods at four, their fields at six).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./server.mjs";

export function operations() {
  const found = [];
  let path = null;
  let method = null;
  for (const line of readFileSync(join(ROOT, "openapi.yaml"), "utf8").split("\n")) {
    let match;
    if ((match = /^ {2}(\/\S*):$/.exec(line))) {
      path = match[1];
      method = null;
    } else if (path && (match = /^ {4}(get|put|post|patch|delete):$/.exec(line))) {
      method = match[1].toUpperCase();
    } else if (path && method && (match = /^ {6}operationId: (\w+)$/.exec(line))) {
      found.push({ path, method, operationId: match[1] });
    } else if (/^\S/.test(line)) {
      path = null;
    }
  }
  return found;
}

/** Whether `pathname` (as sent, encoded) is an instance of the template `path`. */
export function matches(path, pathname) {
  const pattern = path.replace(/\{[^}]+\}/g, "[^/]+");
  return new RegExp(`^${pattern}$`).test(pathname);
}
