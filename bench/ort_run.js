// Runs an ONNX model with ONNX Runtime (npm's onnxruntime-node, CPU) for the
// tests (the oracle) and tunefarm-bench models (the latency peer).
//   node bench/ort_run.js MODEL.onnx --threads N [--repeat N] [--input NAME=FILE.npy]...
//                         [--shape NAME=D1xD2...] [--value NAME=V1,V2...] [--seed N] [--out DIR]
//                         [--opt all|extended|basic|disabled]
// Inputs not given are seeded uniform random in [-1, 1) (shapes from the model
// or --shape); --value fixes an input to values, in the input's element
// type. Prints one JSON line: {"latency_ms": median, "runs": N, "outputs": [...]}.
// ORT_NODE names the onnxruntime-node directory (default: the fetch-models cache).
'use strict';
const fs = require('fs');
const path = require('path');
const os = require('os');

const cache = process.env.TUNEFARM_CACHE || path.join(os.homedir(), '.cache', 'tunefarm');
const ort = require(process.env.ORT_NODE || path.join(cache, 'ort', 'node_modules', 'onnxruntime-node'));

function readNpy(file) {
  const b = fs.readFileSync(file);
  if (b.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = b[6];
  const hlen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = b.toString('latin1', start, start + hlen);
  if (!header.includes("'<f4'")) throw new Error(`${file}: float32 only`);
  const m = header.match(/'shape':\s*\(([^)]*)\)/);
  const shape = m[1].split(',').map(s => s.trim()).filter(s => s.length).map(Number);
  const off = start + hlen;
  const data = new Float32Array(b.buffer.slice(b.byteOffset + off, b.byteOffset + b.length));
  return { shape, data };
}

function writeNpy(file, shape, data) {
  const dims = shape.length === 1 ? `${shape[0]},` : shape.join(', ');
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${dims}), }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - total % 64) % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1; pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const f32 = Float32Array.from(data);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), Buffer.from(f32.buffer)]));
}

function rng(seed) {  // xorshift64*, uniform in [-1, 1)
  let s = BigInt(seed) || 1n;
  return () => {
    s ^= s >> 12n; s ^= (s << 25n) & 0xffffffffffffffffn; s ^= s >> 27n;
    const v = (s * 2685821657736338717n) & 0xffffffffffffffffn;
    return Number(v >> 11n) / 2 ** 53 * 2 - 1;
  };
}

async function main() {
  const args = process.argv.slice(2);
  const model = args[0];
  let threads = 1, repeat = 10, seed = 1, out = null, opt = 'all';
  const inputs = {}, shapes = {}, values = {};
  for (let i = 1; i < args.length; i += 2) {
    const [k, v] = [args[i], args[i + 1]];
    if (k === '--threads') threads = Number(v);
    else if (k === '--repeat') repeat = Number(v);
    else if (k === '--seed') seed = Number(v);
    else if (k === '--out') out = v;
    else if (k === '--opt') opt = v;
    else if (k === '--input') { const [n, f] = v.split('='); inputs[n] = readNpy(f); }
    else if (k === '--shape') { const [n, d] = v.split('='); shapes[n] = d.split('x').map(Number); }
    else if (k === '--value') { const [n, d] = v.split('='); values[n] = d.split(',').map(Number); }
    else throw new Error(`unknown flag ${k}`);
  }
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: opt, logSeverityLevel: 3 });
  const feeds = {};
  const r = rng(seed);
  for (const name of session.inputNames) {
    const meta = session.inputMetadata ? session.inputMetadata.find(m => m.name === name) : null;
    if (values[name]) {
      // An input fixed to values (as `tunefarm build --value`), in its own type.
      const v = values[name];
      const known = meta && meta.shape && meta.shape.every(d => typeof d === 'number');
      const shape = shapes[name] || (known ? meta.shape : [v.length]);
      const type = (meta && meta.type) || 'float32';
      const data = type === 'int64' ? BigInt64Array.from(v.map(BigInt))
                 : type === 'int32' ? Int32Array.from(v) : Float32Array.from(v);
      feeds[name] = new ort.Tensor(type, data, shape);
      continue;
    }
    let t = inputs[name];
    if (!t) {
      const shape = shapes[name] || (meta && meta.shape);
      if (!shape || shape.some(d => typeof d !== 'number')) throw new Error(`input ${name} needs --shape`);
      const n = shape.reduce((a, b) => a * b, 1);
      const data = new Float32Array(n);
      for (let j = 0; j < n; ++j) data[j] = r();
      t = { shape, data };
    }
    feeds[name] = new ort.Tensor('float32', t.data, t.shape);
  }
  let result = await session.run(feeds);
  const lat = [];
  for (let i = 0; i < repeat; ++i) {
    const t0 = process.hrtime.bigint();
    result = await session.run(feeds);
    lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  lat.sort((a, b) => a - b);
  const outputs = [];
  for (const name of session.outputNames) {
    const t = result[name];
    outputs.push({ name, shape: t.dims });
    if (out) {
      fs.mkdirSync(out, { recursive: true });
      writeNpy(path.join(out, name.replace(/[^A-Za-z0-9_.-]/g, '_') + '.npy'), t.dims, t.data);
    }
  }
  console.log(JSON.stringify({ latency_ms: lat.length ? lat[Math.floor(lat.length / 2)] : null,
                               runs: lat.length, threads, outputs }));
}
main().catch(e => { console.error(`ort_run: ${e.message}`); process.exit(1); });
