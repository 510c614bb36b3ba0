// src/schema.ts from ../../openapi.yaml, by openapi-typescript: `node scripts/schema.mjs
// write` makes it (npm run generate:types), `node scripts/schema.mjs check` fails when the
// committed one differs from what it would make today (npm run check:types: the drift check).
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const committed = join(root, "src", "schema.ts");
const mode = process.argv[2];
if (mode !== "write" && mode !== "check") {
  console.error("usage: node scripts/schema.mjs write|check");
  process.exit(2);
}

const scratch = mkdtempSync(join(tmpdir(), "hourglass-schema-"));
try {
  const fresh = join(scratch, "schema.ts");
  // Fields with a default stay optional in request bodies (a default is not a requirement).
  execFileSync(
    join(root, "node_modules", ".bin", "openapi-typescript"),
    ["../../openapi.yaml", "--default-non-nullable", "false", "--output", fresh],
    { cwd: root, stdio: ["ignore", "ignore", "inherit"] },
  );
  if (mode === "write") {
    copyFileSync(fresh, committed);
    console.log("wrote src/schema.ts from openapi.yaml");
  } else if (readFileSync(fresh, "utf8") !== readFileSync(committed, "utf8")) {
    console.error(
      "src/schema.ts differs from what openapi-typescript makes of openapi.yaml: run " +
        "`npm run generate:types` in clients/typescript and commit the result",
    );
    process.exit(1);
  } else {
    console.log("src/schema.ts matches openapi.yaml");
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
