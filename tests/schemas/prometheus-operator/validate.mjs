// Validate ServiceMonitor, PodMonitor, PrometheusRule and AlertmanagerConfig objects against the Prometheus Operator's
// CRD schemas, the way the API server would with strict field validation:
//
//   1. the schema (types, required fields, enums, patterns such as the duration
//      format of `interval`): the JSON-schema validators that
//      @kubernetes-models/prometheus-operator compiles from the operator's
//      published CRDs (see README.md for the exact release);
//   2. unknown fields (what `kubectl apply --validate=strict` rejects): the same
//      package's TypeScript interfaces, generated from the same CRDs, checked by the
//      TypeScript compiler, whose excess-property check rejects any field the schema
//      does not declare. The CRD schemas do not say `additionalProperties: false`,
//      so step 1 alone would let a misspelt field through.
//
// Input: a JSON array of objects on stdin. Output: a JSON array of
// {index, kind, name, errors: [string]} for every object with errors (empty: all valid).
// Objects of other kinds are an error: the caller sends only these four kinds.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor";
import { AlertmanagerConfig } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1alpha1/AlertmanagerConfig";

const HERE = dirname(fileURLToPath(import.meta.url));
const KINDS = {
  ServiceMonitor: { model: ServiceMonitor, iface: "IServiceMonitor", version: "v1" },
  PodMonitor: { model: PodMonitor, iface: "IPodMonitor", version: "v1" },
  PrometheusRule: { model: PrometheusRule, iface: "IPrometheusRule", version: "v1" },
  AlertmanagerConfig: { model: AlertmanagerConfig, iface: "IAlertmanagerConfig", version: "v1alpha1" },
};

function schemaErrors(doc) {
  const kind = KINDS[doc.kind];
  if (!kind || doc.apiVersion !== `monitoring.coreos.com/${kind.version}`) {
    return [`not a ServiceMonitor, PodMonitor, PrometheusRule (v1) or AlertmanagerConfig (v1alpha1): ${doc.apiVersion} ${doc.kind}`];
  }
  try {
    new kind.model(doc).validate();
    return [];
  } catch (e) {
    return [String(e.message || e)];
  }
}

// One virtual TypeScript file assigning every object to its interface; the compiler's
// diagnostics are mapped back to the object by line.
function unknownFieldErrors(docs) {
  const lines = [];
  for (const kind of Object.keys(KINDS)) {
    lines.push(
      `import type { ${KINDS[kind].iface} } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/${KINDS[kind].version}/${kind}";`,
    );
  }
  const lineOf = new Map();
  docs.forEach((doc, i) => {
    const kind = KINDS[doc.kind];
    if (!kind) return;
    lineOf.set(lines.length, i);
    lines.push(`export const d${i}: ${kind.iface} = ${JSON.stringify(doc)};`);
  });
  const file = join(HERE, "__rendered__.ts");
  const source = lines.join("\n");
  const options = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  const fileExists = host.fileExists.bind(host);
  const readFile = host.readFile.bind(host);
  host.getSourceFile = (name, lang, ...rest) =>
    name === file ? ts.createSourceFile(name, source, lang) : getSourceFile(name, lang, ...rest);
  host.fileExists = (name) => name === file || fileExists(name);
  host.readFile = (name) => (name === file ? source : readFile(name));
  const program = ts.createProgram([file], options, host);
  const byDoc = new Map();
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const msg = ts.flattenDiagnosticMessageText(d.messageText, " ");
    let i = -1;
    if (d.file && d.file.fileName === file && d.start !== undefined) {
      const { line } = d.file.getLineAndCharacterOfPosition(d.start);
      i = lineOf.has(line) ? lineOf.get(line) : -1;
    }
    if (!byDoc.has(i)) byDoc.set(i, []);
    byDoc.get(i).push(msg.length > 400 ? `${msg.slice(0, 400)}...` : msg);
  }
  return byDoc;
}

const docs = JSON.parse(readFileSync(0, "utf8"));
const typeErrors = unknownFieldErrors(docs);
const out = [];
docs.forEach((doc, i) => {
  const errors = [...schemaErrors(doc), ...(typeErrors.get(i) || [])];
  if (errors.length) out.push({ index: i, kind: doc.kind, name: doc.metadata?.name, errors });
});
if (typeErrors.has(-1)) out.push({ index: -1, kind: "", name: "", errors: typeErrors.get(-1) });
process.stdout.write(JSON.stringify(out, null, 1) + "\n");
