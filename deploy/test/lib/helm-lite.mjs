// helm-lite: renders a Helm chart's templates without the helm binary (not
// packaged for Debian 12). It implements the Go text/template language
// (actions, trim markers, if/else if/else, range, with, define, variables,
// pipelines, parenthesised sub-expressions) and the Sprig/Helm functions this
// project's chart uses. Anything else is an error, never a silent guess, so a
// template that renders here either renders the same under helm or fails here.
//
// Semantics follow helm 3: missing map keys render as "" (missingkey=zero),
// a field of a nil value is an error ("nil pointer evaluating"), map ranges
// iterate in sorted key order, and/or return an operand, toYaml drops the
// trailing newline.

import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import yaml from 'js-yaml';

export class TemplateError extends Error {}

// ---------------------------------------------------------------- lexing

function lex(src, file) {
  const out = [];
  let i = 0;
  while (i < src.length) {
    const open = src.indexOf('{{', i);
    if (open < 0) {
      out.push({ type: 'text', value: src.slice(i) });
      break;
    }
    out.push({ type: 'text', value: src.slice(i, open) });
    let j = open + 2;
    let trimLeft = false;
    if (src.startsWith('- ', j) || src.startsWith('-\n', j) || src.startsWith('-\t', j)) {
      trimLeft = true;
      j += 1;
    }
    // Find the closing braces outside string literals; a comment may hold
    // anything up to "*/".
    let k = j;
    if (src.slice(j).trimStart().startsWith('/*')) {
      const end = src.indexOf('*/', j);
      k = end < 0 ? src.length : src.indexOf('}}', end);
      if (k < 0) k = src.length;
    } else {
      let quote = null;
      for (; k < src.length; k++) {
        const c = src[k];
        if (quote) {
          if (quote === '"' && c === '\\') { k++; continue; }
          if (c === quote) quote = null;
          continue;
        }
        if (c === '"' || c === '`') { quote = c; continue; }
        if (c === '}' && src[k + 1] === '}') break;
      }
    }
    if (k >= src.length) throw new TemplateError(`${file}: unclosed action at offset ${open}`);
    let body = src.slice(j, k);
    let trimRight = false;
    if (/[ \t\n]-$/.test(body)) {
      trimRight = true;
      body = body.slice(0, -1);
    }
    const line = src.slice(0, open).split('\n').length;
    out.push({ type: 'action', body: body.trim(), trimLeft, trimRight, line, file });
    i = k + 2;
  }
  // Apply trim markers to neighbouring text.
  for (let n = 0; n < out.length; n++) {
    const t = out[n];
    if (t.type !== 'action') continue;
    if (t.trimLeft && n > 0 && out[n - 1].type === 'text') {
      out[n - 1].value = out[n - 1].value.replace(/[ \t\r\n]+$/, '');
    }
    if (t.trimRight && n + 1 < out.length && out[n + 1].type === 'text') {
      out[n + 1].value = out[n + 1].value.replace(/^[ \t\r\n]+/, '');
    }
  }
  return out.filter((t) => t.type !== 'action' || !t.body.startsWith('/*'));
}

// ------------------------------------------------------- expression parsing

function tokenizeExpr(s, where) {
  const toks = [];
  let i = 0;
  while (i < s.length) {
    const c = s[i];
    if (/\s/.test(c)) { i++; continue; }
    if (c === '"') {
      let j = i + 1;
      while (j < s.length && s[j] !== '"') j += s[j] === '\\' ? 2 : 1;
      toks.push({ t: 'lit', v: JSON.parse(s.slice(i, j + 1)) });
      i = j + 1;
      continue;
    }
    if (c === '`') {
      const j = s.indexOf('`', i + 1);
      toks.push({ t: 'lit', v: s.slice(i + 1, j) });
      i = j + 1;
      continue;
    }
    if (s.startsWith(':=', i)) { toks.push({ t: ':=' }); i += 2; continue; }
    if ('()|,='.includes(c)) { toks.push({ t: c }); i++; continue; }
    const m = /^(-?\d+(\.\d+)?|\$[A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*|(\.[A-Za-z0-9_]+)+|\.|[A-Za-z_][A-Za-z0-9_]*)/.exec(s.slice(i));
    if (!m) throw new TemplateError(`${where}: cannot parse '${s.slice(i)}'`);
    const w = m[0];
    if (/^-?\d/.test(w)) toks.push({ t: 'lit', v: Number(w) });
    else if (w === 'true' || w === 'false') toks.push({ t: 'lit', v: w === 'true' });
    else if (w === 'nil') toks.push({ t: 'lit', v: null });
    else if (w[0] === '$') {
      const [name, ...fields] = w.split('.');
      toks.push({ t: 'var', name, fields });
    } else if (w[0] === '.') toks.push({ t: 'field', fields: w === '.' ? [] : w.slice(1).split('.') });
    else toks.push({ t: 'ident', v: w });
    i += w.length;
    // A field chain directly after ')' e.g. (index .a 0).b
    if (toks.length >= 2 && toks[toks.length - 1].t === 'field' && toks[toks.length - 2].t === ')' && s[i - w.length - 1] === ')') {
      toks[toks.length - 1].t = 'chain';
    }
  }
  return toks;
}

function parsePipeline(toks, pos, where) {
  // [decl] cmd (| cmd)*
  const pipe = { decl: null, assign: false, cmds: [] };
  const save = pos.i;
  const declVars = [];
  while (toks[pos.i] && toks[pos.i].t === 'var' && toks[pos.i].fields.length === 0) {
    declVars.push(toks[pos.i].name);
    pos.i++;
    if (toks[pos.i] && toks[pos.i].t === ',') { pos.i++; continue; }
    break;
  }
  if (declVars.length && toks[pos.i] && (toks[pos.i].t === ':=' || toks[pos.i].t === '=')) {
    pipe.decl = declVars;
    pipe.assign = toks[pos.i].t === '=';
    pos.i++;
  } else {
    pos.i = save;
  }
  for (;;) {
    const cmd = [];
    while (pos.i < toks.length && toks[pos.i].t !== '|' && toks[pos.i].t !== ')') {
      const tk = toks[pos.i++];
      if (tk.t === '(') {
        const sub = parsePipeline(toks, pos, where);
        if (!toks[pos.i] || toks[pos.i].t !== ')') throw new TemplateError(`${where}: missing ')'`);
        pos.i++;
        let node = { t: 'sub', pipe: sub };
        if (toks[pos.i] && toks[pos.i].t === 'chain') node = { t: 'chainOn', base: node, fields: toks[pos.i++].fields };
        cmd.push(node);
      } else {
        cmd.push(tk);
      }
    }
    if (!cmd.length) throw new TemplateError(`${where}: empty command`);
    pipe.cmds.push(cmd);
    if (toks[pos.i] && toks[pos.i].t === '|') { pos.i++; continue; }
    break;
  }
  return pipe;
}

function parseExpr(s, where) {
  const toks = tokenizeExpr(s, where);
  const pos = { i: 0 };
  const p = parsePipeline(toks, pos, where);
  if (pos.i !== toks.length) throw new TemplateError(`${where}: unexpected '${JSON.stringify(toks[pos.i])}'`);
  return p;
}

// ------------------------------------------------------------ tree parsing

function parseTree(tokens, defines) {
  const pos = { i: 0 };
  function block(stopWords) {
    const nodes = [];
    while (pos.i < tokens.length) {
      const tk = tokens[pos.i];
      if (tk.type === 'text') { nodes.push({ k: 'text', v: tk.value }); pos.i++; continue; }
      const where = `${tk.file}:${tk.line}`;
      const [word] = tk.body.split(/\s+/, 1);
      const rest = tk.body.slice(word.length).trim();
      if (stopWords.includes(word)) return { nodes, stop: tk, word, rest };
      pos.i++;
      if (word === 'if' || word === 'with' || word === 'range') {
        const node = { k: word, pipe: parseExpr(rest, where), body: null, elses: [], where };
        let r = block(['else', 'end']);
        node.body = r.nodes;
        while (r.word === 'else') {
          pos.i++;
          if (r.rest.startsWith('if ')) {
            const cond = parseExpr(r.rest.slice(3), where);
            r = block(['else', 'end']);
            node.elses.push({ cond, body: r.nodes });
          } else {
            r = block(['end']);
            node.elses.push({ cond: null, body: r.nodes });
          }
        }
        if (r.word !== 'end') throw new TemplateError(`${where}: missing {{ end }} for ${word}`);
        pos.i++;
        nodes.push(node);
      } else if (word === 'define') {
        const name = JSON.parse(rest);
        const r = block(['end']);
        if (r.word !== 'end') throw new TemplateError(`${where}: missing {{ end }} for define`);
        pos.i++;
        defines[name] = r.nodes;
      } else if (word === 'else' || word === 'end') {
        throw new TemplateError(`${where}: unexpected {{ ${word} }}`);
      } else if (word === 'template' || word === 'block') {
        throw new TemplateError(`${where}: '${word}' is not supported by helm-lite; use include`);
      } else {
        nodes.push({ k: 'action', pipe: parseExpr(tk.body, where), where });
      }
    }
    return { nodes, stop: null, word: null };
  }
  const r = block([]);
  return r.nodes;
}

// --------------------------------------------------------------- evaluation

function truthy(v) {
  if (v === null || v === undefined || v === false || v === 0 || v === '') return false;
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === 'object') return Object.keys(v).length > 0;
  return true;
}

function goString(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return `[${v.map(goString).join(' ')}]`;
  return `map[${Object.keys(v).sort().map((k) => `${k}:${goString(v[k])}`).join(' ')}]`;
}

// strict = helm's missingkey=error (what `helm lint --strict` uses).
function field(v, names, where, strict) {
  for (const n of names) {
    if (v === null || v === undefined) throw new TemplateError(`${where}: nil pointer evaluating .${n}`);
    if (typeof v !== 'object') throw new TemplateError(`${where}: can't evaluate field ${n} in ${typeof v}`);
    if (!Object.prototype.hasOwnProperty.call(v, n)) {
      if (strict) throw new TemplateError(`${where}: map has no entry for key "${n}"`);
      v = null;
    } else {
      v = v[n];
    }
  }
  return v;
}

function toYaml(v) {
  if (v === null || v === undefined) return 'null';
  return yaml.dump(v, { lineWidth: -1, sortKeys: true, noRefs: true }).replace(/\n$/, '');
}

function indentLines(n, s) {
  const pad = ' '.repeat(n);
  return String(s).split('\n').map((l) => pad + l).join('\n');
}

function printf(fmt, ...args) {
  let a = 0;
  return fmt.replace(/%([-+ #0]*\d*)([sdvq%])/g, (m, flags, verb) => {
    if (verb === '%') return '%';
    const x = args[a++];
    if (verb === 'q') return JSON.stringify(goString(x));
    return goString(x);
  });
}

export class Chart {
  constructor(dir) {
    this.dir = dir;
    this.meta = yaml.load(fs.readFileSync(path.join(dir, 'Chart.yaml'), 'utf8'));
    this.defaults = yaml.load(fs.readFileSync(path.join(dir, 'values.yaml'), 'utf8')) || {};
    this.defines = {};
    this.templates = {};
    const tdir = path.join(dir, 'templates');
    for (const f of fs.readdirSync(tdir).sort()) {
      if (!/\.(ya?ml|tpl)$/.test(f)) continue;
      const src = fs.readFileSync(path.join(tdir, f), 'utf8');
      const tree = parseTree(lex(src, `templates/${f}`), this.defines);
      if (!f.startsWith('_')) this.templates[`templates/${f}`] = tree;
    }
  }

  // Returns {file: renderedText}.
  render({ values = {}, releaseName = 'release', namespace = 'default', strict = false } = {}) {
    this.strict = strict;
    const merged = deepMerge(structuredClone(this.defaults), values);
    const root = {
      Values: merged,
      Release: { Name: releaseName, Namespace: namespace, Service: 'Helm', IsInstall: true, IsUpgrade: false, Revision: 1 },
      Chart: { Name: this.meta.name, Version: this.meta.version, AppVersion: this.meta.appVersion ?? '' },
      Capabilities: { KubeVersion: { Version: 'v1.31.0', Major: '1', Minor: '31' } },
    };
    const out = {};
    for (const [file, tree] of Object.entries(this.templates)) {
      root.Template = { Name: `${this.meta.name}/${file}`, BasePath: `${this.meta.name}/templates` };
      out[file] = this.exec(tree, root, [{ $: root }]);
    }
    return out;
  }

  exec(nodes, dot, scopes) {
    let s = '';
    for (const n of nodes) {
      if (n.k === 'text') { s += n.v; continue; }
      if (n.k === 'action') {
        const v = this.evalPipe(n.pipe, dot, scopes, n.where);
        if (!n.pipe.decl) s += goString(v);
        continue;
      }
      const inner = [...scopes, {}];
      if (n.k === 'if' || n.k === 'with') {
        const v = this.evalPipe(n.pipe, dot, inner, n.where);
        if (truthy(v)) { s += this.exec(n.body, n.k === 'with' ? v : dot, inner); continue; }
        let done = false;
        for (const e of n.elses) {
          if (e.cond === null) { s += this.exec(e.body, dot, [...scopes, {}]); done = true; break; }
          const ev = this.evalPipe(e.cond, dot, inner, n.where);
          if (truthy(ev)) { s += this.exec(e.body, n.k === 'with' ? ev : dot, inner); done = true; break; }
        }
        continue;
      }
      if (n.k === 'range') {
        const decl = n.pipe.decl;
        const v = this.evalPipe({ ...n.pipe, decl: null }, dot, inner, n.where);
        let entries = [];
        if (Array.isArray(v)) entries = v.map((x, idx) => [idx, x]);
        else if (v && typeof v === 'object') entries = Object.keys(v).sort().map((k) => [k, v[k]]);
        else if (typeof v === 'number') entries = [...Array(v).keys()].map((x) => [x, x]);
        else if (v !== null && v !== undefined) throw new TemplateError(`${n.where}: range can't iterate over ${goString(v)}`);
        if (!entries.length) {
          for (const e of n.elses) s += this.exec(e.body, dot, [...scopes, {}]);
          continue;
        }
        for (const [k, x] of entries) {
          const sc = {};
          if (decl && decl.length === 1) sc[decl[0]] = x;
          if (decl && decl.length === 2) { sc[decl[0]] = k; sc[decl[1]] = x; }
          s += this.exec(n.body, x, [...scopes, sc]);
        }
        continue;
      }
      throw new TemplateError(`unknown node ${n.k}`);
    }
    return s;
  }

  lookupVar(name, scopes, where) {
    for (let i = scopes.length - 1; i >= 0; i--) {
      if (Object.prototype.hasOwnProperty.call(scopes[i], name)) return scopes[i][name];
    }
    throw new TemplateError(`${where}: undefined variable ${name}`);
  }

  evalPipe(pipe, dot, scopes, where) {
    let v;
    let first = true;
    for (const cmd of pipe.cmds) {
      v = this.evalCmd(cmd, dot, scopes, where, first ? undefined : { v });
      first = false;
    }
    if (pipe.decl) {
      if (pipe.assign) {
        for (let i = scopes.length - 1; i >= 0; i--) {
          if (Object.prototype.hasOwnProperty.call(scopes[i], pipe.decl[0])) { scopes[i][pipe.decl[0]] = v; return v; }
        }
        throw new TemplateError(`${where}: undefined variable ${pipe.decl[0]}`);
      }
      scopes[scopes.length - 1][pipe.decl[0]] = v;
    }
    return v;
  }

  evalArg(tk, dot, scopes, where) {
    switch (tk.t) {
      case 'lit': return tk.v;
      case 'field': return field(dot, tk.fields, where, this.strict);
      case 'var': return field(this.lookupVar(tk.name, scopes, where), tk.fields, where, this.strict);
      case 'sub': return this.evalPipe(tk.pipe, dot, scopes, where);
      case 'chainOn': return field(this.evalArg(tk.base, dot, scopes, where), tk.fields, where, this.strict);
      case 'ident': return this.call(tk.v, [], dot, scopes, where);
      default: throw new TemplateError(`${where}: unexpected token ${tk.t}`);
    }
  }

  evalCmd(cmd, dot, scopes, where, piped) {
    const [head, ...rest] = cmd;
    if (head.t === 'ident') {
      const args = rest.map((a) => this.evalArg(a, dot, scopes, where));
      if (piped) args.push(piped.v);
      return this.call(head.v, args, dot, scopes, where);
    }
    if (rest.length) throw new TemplateError(`${where}: can't give arguments to a non-function`);
    if (piped) throw new TemplateError(`${where}: can't pipe into a non-function`);
    return this.evalArg(head, dot, scopes, where);
  }

  call(name, args, dot, scopes, where) {
    const need = (n) => {
      if (args.length !== n) throw new TemplateError(`${where}: ${name} wants ${n} args, got ${args.length}`);
    };
    switch (name) {
      case 'include': {
        need(2);
        const body = this.defines[args[0]];
        if (!body) throw new TemplateError(`${where}: no template "${args[0]}"`);
        return this.exec(body, args[1], [{ $: args[1] }]);
      }
      case 'toYaml': need(1); return toYaml(args[0]);
      case 'toJson': need(1); return JSON.stringify(args[0] ?? null);
      case 'nindent': need(2); return '\n' + indentLines(args[0], args[1]);
      case 'indent': need(2); return indentLines(args[0], args[1]);
      case 'quote': return args.map((a) => JSON.stringify(goString(a))).join(' ');
      case 'squote': return args.map((a) => `'${goString(a)}'`).join(' ');
      case 'default': need(2); return truthy(args[1]) ? args[1] : args[0];
      case 'required': need(2); if (args[1] === null || args[1] === undefined || args[1] === '') throw new TemplateError(`${where}: ${args[0]}`); return args[1];
      case 'fail': throw new TemplateError(`${where}: fail: ${args[0]}`);
      case 'printf': return printf(goString(args[0]), ...args.slice(1));
      case 'print': return args.map(goString).join('');
      case 'toString': need(1); return goString(args[0]);
      case 'eq': return args.slice(1).some((b) => args[0] === b);
      case 'ne': need(2); return args[0] !== args[1];
      case 'lt': need(2); return args[0] < args[1];
      case 'le': need(2); return args[0] <= args[1];
      case 'gt': need(2); return args[0] > args[1];
      case 'ge': need(2); return args[0] >= args[1];
      case 'and': { let v = true; for (const a of args) { v = a; if (!truthy(a)) return a; } return v; }
      case 'or': { let v = false; for (const a of args) { v = a; if (truthy(a)) return a; } return v; }
      case 'not': need(1); return !truthy(args[0]);
      case 'empty': need(1); return !truthy(args[0]);
      case 'len': need(1); return Array.isArray(args[0]) || typeof args[0] === 'string' ? args[0].length : Object.keys(args[0] ?? {}).length;
      case 'index': { let v = args[0]; for (const k of args.slice(1)) v = v == null ? null : (v[k] ?? null); return v; }
      case 'trunc': need(2); return goString(args[1]).slice(0, args[0]);
      case 'trimSuffix': need(2); return goString(args[1]).endsWith(args[0]) ? goString(args[1]).slice(0, -args[0].length || undefined) : goString(args[1]);
      case 'trimPrefix': need(2); return goString(args[1]).startsWith(args[0]) ? goString(args[1]).slice(args[0].length) : goString(args[1]);
      case 'replace': need(3); return goString(args[2]).split(args[0]).join(args[1]);
      case 'contains': need(2); return goString(args[1]).includes(args[0]);
      case 'lower': need(1); return goString(args[0]).toLowerCase();
      case 'upper': need(1); return goString(args[0]).toUpperCase();
      case 'join': need(2); return (args[1] ?? []).map(goString).join(args[0]);
      case 'list': return [...args];
      case 'dict': { const d = {}; for (let i = 0; i < args.length; i += 2) d[goString(args[i])] = args[i + 1]; return d; }
      case 'hasKey': need(2); return args[0] != null && Object.prototype.hasOwnProperty.call(args[0], args[1]);
      case 'ternary': need(3); return truthy(args[2]) ? args[0] : args[1];
      case 'sha256sum': need(1); return crypto.createHash('sha256').update(goString(args[0])).digest('hex');
      default: throw new TemplateError(`${where}: function "${name}" not defined in helm-lite`);
    }
  }
}

export function deepMerge(base, over) {
  if (over === null || typeof over !== 'object' || Array.isArray(over)) return over;
  if (base === null || typeof base !== 'object' || Array.isArray(base)) base = {};
  for (const [k, v] of Object.entries(over)) {
    base[k] = v !== null && typeof v === 'object' && !Array.isArray(v) ? deepMerge(base[k], v) : v;
  }
  return base;
}

// Splits rendered files into parsed objects, as `helm template` would emit.
export function renderedObjects(files) {
  const objs = [];
  for (const [file, text] of Object.entries(files)) {
    for (const doc of text.split(/^---\s*$/m)) {
      let o;
      try {
        o = yaml.load(doc);
      } catch (e) {
        throw new TemplateError(`${file}: rendered output is not YAML: ${e.message}\n${doc}`);
      }
      if (o !== null && o !== undefined) objs.push({ source: file, obj: o });
    }
  }
  return objs;
}
