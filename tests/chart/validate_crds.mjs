// Validate ServiceMonitor and PrometheusRule manifests (a JSON array on stdin) against the
// prometheus-operator CRD schemas compiled into @kubernetes-models/prometheus-operator, which
// .ci/install-tools installs under .tools/npm. Prints each error; exits 1 when any.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const root = process.argv[2];
const base = join(root, "node_modules", "@kubernetes-models", "prometheus-operator", "monitoring.coreos.com", "v1");
const kinds = {};
for (const kind of ["ServiceMonitor", "PrometheusRule"]) {
  kinds[kind] = (await import(pathToFileURL(join(base, `${kind}.js`)).href))[kind];
}
const docs = JSON.parse(readFileSync(0, "utf8"));
let failed = 0;
for (const doc of docs) {
  const model = kinds[doc.kind];
  if (!model) {
    console.log(`unexpected kind ${doc.kind}`);
    failed++;
    continue;
  }
  try {
    new model(doc).validate();
    console.log(`ok ${doc.kind} ${doc.metadata.name}`);
  } catch (error) {
    console.log(`invalid ${doc.kind} ${doc.metadata.name}: ${error.message}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
