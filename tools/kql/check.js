#!/usr/bin/env node
// Analyze KQL queries with Kusto's own language service (@kusto/language-service-next).
//
// Input (JSON, from the file named by the first argument, or standard input):
//   {
//     "tables":  {"ScheduledEvents_CL": [["TimeGenerated", "datetime"], ...], ...},
//     "queries": [{"id": "dashboards/queries/x.kql", "text": "...",
//                  "tables": {"source": [[...]]}}]      // optional: replaces the global tables
//   }
// Output (JSON on standard output):
//   {"engine": "<package version>",
//    "results": [{"id", "errors": [{code, message, start, length, text}], "warnings": [...],
//                 "syntaxKinds": [...], "tablesReferenced": [...], "functionsCalled": [...],
//                 "resultColumns": [[name, type], ...] or null when the result is not a table}]}
// Exit status 0 when it could analyze everything (whatever the diagnostics), 2 on bad input,
// 3 when the language service is not installed (run: npm ci --prefix tools/kql).
'use strict';

const fs = require('fs');
const path = require('path');

let pkgVersion = 'unknown';
try {
  require('@kusto/language-service-next/bridge.min.js');
  require('@kusto/language-service-next/Kusto.Language.Bridge.min.js');
  pkgVersion = require('@kusto/language-service-next/package.json').version;
} catch (err) {
  process.stderr.write(
    'cannot load @kusto/language-service-next (run: npm ci --prefix tools/kql): ' + err.message + '\n');
  process.exit(3);
}

const K = Kusto.Language;
const S = K.Symbols;

function tableSymbol(name, columns) {
  if (!Array.isArray(columns) || columns.length === 0) {
    throw new Error(`table ${name}: no columns`);
  }
  for (const c of columns) {
    if (!Array.isArray(c) || c.length !== 2 || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(c[0]) ||
        !/^[a-z]+$/.test(c[1])) {
      throw new Error(`table ${name}: bad column ${JSON.stringify(c)}`);
    }
  }
  const schema = '(' + columns.map(([n, t]) => `['${n}']:${t}`).join(', ') + ')';  // quoted: kind, plan, type... are keywords
  const sym = S.TableSymbol.From(schema);
  if (!sym) throw new Error(`table ${name}: cannot build schema ${schema}`);
  return sym.WithName(name);
}

function globalsFor(tables) {
  const syms = Object.entries(tables).map(([n, cols]) => tableSymbol(n, cols));
  const db = new S.DatabaseSymbol.$ctor1('workspace', syms, false);
  return K.GlobalState.Default.WithDatabase(db);
}

function list(x) {
  const out = [];
  if (!x) return out;
  for (let i = 0; i < x.Count; i++) out.push(x.getItem(i));
  return out;
}

function analyze(text, globals) {
  const code = K.KustoCode.ParseAndAnalyze(text, globals);
  const diags = list(code.GetDiagnostics());
  const fmt = (d) => ({
    code: d.Code, message: d.Message, start: d.Start, length: d.Length,
    text: text.substr(d.Start, Math.max(d.Length, 1)),
  });
  const kinds = new Set();
  const tablesReferenced = new Set();
  const functionsCalled = new Set();
  code.Syntax.WalkElements((e) => {
    if (Bridge.is(e, K.Syntax.FunctionCallExpression) && e.Name) functionsCalled.add(e.Name.SimpleName);
    kinds.add(Bridge.Reflection.getTypeName(Bridge.getType(e)).split('.').pop());
    if (Bridge.is(e, K.Syntax.NameReference)) {
      const sym = e.ReferencedSymbol;
      if (sym && Bridge.is(sym, S.TableSymbol)) tablesReferenced.add(sym.Name);
    }
  });
  const result = code.ResultType;
  const resultColumns = (result && Bridge.is(result, S.TableSymbol))
    ? list(result.Columns).map((c) => [c.Name, c.Type ? c.Type.Name : null]) : null;
  return {
    resultColumns,
    errors: diags.filter((d) => d.Severity === 'Error').map(fmt),
    warnings: diags.filter((d) => d.Severity === 'Warning').map(fmt),
    syntaxKinds: [...kinds].sort(),
    tablesReferenced: [...tablesReferenced].sort(),
    functionsCalled: [...functionsCalled].sort(),
  };
}

function main() {
  const src = process.argv[2] ? fs.readFileSync(path.resolve(process.argv[2]), 'utf8')
    : fs.readFileSync(0, 'utf8');
  let input;
  try {
    input = JSON.parse(src);
  } catch (err) {
    process.stderr.write('input is not JSON: ' + err.message + '\n');
    return 2;
  }
  if (!input || typeof input.tables !== 'object' || !Array.isArray(input.queries)) {
    process.stderr.write('input needs "tables" (object) and "queries" (array)\n');
    return 2;
  }
  const shared = globalsFor(input.tables);
  const results = input.queries.map((q) => {
    const globals = q.tables ? globalsFor(q.tables) : shared;
    return Object.assign({ id: q.id }, analyze(String(q.text), globals));
  });
  process.stdout.write(JSON.stringify({ engine: pkgVersion, results }) + '\n');
  return 0;
}

try {
  process.exitCode = main();
} catch (err) {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exitCode = 2;
}
