// The benchmark page: kiln-bench's GPT rows (same names, same work) timed
// on the browser's WebGPU adapter. Each figure is the median of `reps`
// timed runs after one warm-up; a run of kiln's is timed until its result
// is read back, the FMA ceiling's until the queue reports its work done.
// State the end-to-end test reads: window.bench.
import init, { Gpu, GptTrainer, GptModel, AttentionLayer } from './pkg/kiln_web.js';
import { describeAdapter, startGpu } from './adapter.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const REPS = Number(params.get('reps') ?? 3);
const CONTEXTS = (params.get('contexts') ?? '128,512,2048').split(',').map(Number);
const TOKENS = Number(params.get('tokens') ?? 64);
// A small GPT's step instead of the demo's (a quick check that the page works).
const TRAINER_OPTIONS = params.has('small') ? '{"context":32,"width":32,"heads":2,"layers":2,"batch":8}' : '{}';

const bench = { status: 'loading', adapter: null, rows: [], error: null };
window.bench = bench;

function setStatus(s) { bench.status = s; $('status').textContent = s; }

// Milliseconds of `reps` awaited runs of `f` after a warm-up: median, min, max.
async function time(f) {
  await f();
  const ms = [];
  for (let i = 0; i < REPS; i++) {
    const t0 = performance.now();
    await f();
    ms.push(performance.now() - t0);
  }
  ms.sort((a, b) => a - b);
  return { median: ms[Math.floor(ms.length / 2)], min: ms[0], max: ms.at(-1) };
}

// A row as kiln-bench reports a rate: `amount` per second of each run, and
// its median as a fraction of `ceiling` when given.
function row(name, t, amount, unit, note = '', ceiling = null) {
  const rate = (ms) => amount / (ms / 1000);
  const r = { bench: name, value: rate(t.median), low: rate(t.max), high: rate(t.min), unit, note };
  if (ceiling) r.fraction = r.value / ceiling;
  bench.rows.push(r);
  const tr = document.createElement('tr');
  const value = `${r.value.toFixed(2)} ${unit}` + (r.fraction ? ` = ${r.fraction.toFixed(3)} of the ceiling` : '');
  for (const cell of [r.bench, value, `${r.low.toFixed(2)}–${r.high.toFixed(2)}`, note]) {
    tr.appendChild(document.createElement('td')).textContent = cell;
  }
  $('rows').tBodies[0].appendChild(tr);
  return r;
}

// kiln-bench's FMA ceiling microkernel (from the wasm module), on a WebGPU
// device of its own: its GFLOP/s, also a row.
async function fmaCeiling() {
  setStatus('the FMA ceiling…');
  const k = JSON.parse(Gpu.fma_ceiling());
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error('no WebGPU adapter for the FMA ceiling');
  const device = await adapter.requestDevice();
  const src = device.createBuffer({ size: 4 * k.params.length, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(src, 0, new Float32Array(k.params));
  const dst = device.createBuffer({ size: k.output_bytes, usage: GPUBufferUsage.STORAGE });
  const compute = { module: device.createShaderModule({ code: k.wgsl }), entryPoint: 'main' };
  const pipeline = device.createComputePipeline({ layout: 'auto', compute });
  const entries = [{ binding: 0, resource: { buffer: src } }, { binding: 1, resource: { buffer: dst } }];
  const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
  try {
    const t = await time(async () => {
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(k.workgroups);
      pass.end();
      device.queue.submit([encoder.finish()]);
      await device.queue.onSubmittedWorkDone();
    });
    return row('ceiling: FMA', t, k.flops / 1e9, 'GFLOP/s', `kiln-bench's microkernel: ${k.chains} fma chains per invocation`).value;
  } finally {
    device.destroy();
  }
}

async function trainStep(gpu, text) {
  const trainer = new GptTrainer(gpu, text, TRAINER_OPTIONS);
  try {
    setStatus('the training step (capturing it first)…');
    await trainer.step(1);
    const before = JSON.parse(gpu.stats());
    await trainer.step(1);
    const after = JSON.parse(gpu.stats());
    const t = await time(() => trainer.step(1));
    const note = `${after.kernels - before.kernels} kernels and ${after.submits - before.submits} submits per step (with the loss's readback)`;
    row(`gpt train step (${trainer.batch}×${trainer.context} characters)`, t, trainer.characters_per_step, 'characters/s', note);
  } finally {
    trainer.free();
  }
}

async function attention(gpu, ceiling) {
  for (const context of CONTEXTS) {
    setStatus(`causal attention at T=${context}…`);
    const layer = new AttentionLayer(gpu, context);
    try {
      const t = await time(() => layer.forward());
      row(`causal attention T=${context} (width 128, 4 heads)`, t, layer.flops / 1e9, 'GFLOP/s',
        'qkv and output projections plus scores and weighted sum, counting the masked half (which one kernel skips)', ceiling);
      const alone = await time(() => layer.attention());
      row(`causal attention kernel T=${context} (4 heads of 32)`, alone, layer.attention_flops / 1e9, 'GFLOP/s',
        'scores and weighted sum, counting the masked half', ceiling);
    } finally {
      layer.free();
    }
  }
}

async function generation(gpu, text) {
  const model = GptModel.untrained(gpu, text);
  try {
    for (const cached of [true, false]) {
      setStatus(`generation ${cached ? 'with' : 'without'} the KV cache…`);
      const t = await time(() => model.generate('And ', TOKENS, 0.8, 0, 1, cached));
      row(`gpt generation (${cached ? 'KV cache' : 'no cache'})`, t, TOKENS, 'characters/s',
        `${TOKENS} characters after a 4-character prompt, batch 1`);
    }
  } finally {
    model.free();
  }
}

async function main() {
  const gpu = await startGpu(init, Gpu);
  bench.adapter = await describeAdapter(gpu);
  $('adapter').textContent = bench.adapter.label;
  const r = await fetch('data/kjv.txt');
  if (!r.ok) throw new Error(`data/kjv.txt: HTTP ${r.status}`);
  const text = await r.text();
  await trainStep(gpu, text);
  await attention(gpu, await fmaCeiling());
  await generation(gpu, text);
  setStatus('done');
}

main().catch((e) => {
  bench.error = `${e.message ?? e}`;
  setStatus('error');
  $('nogpu').hidden = false;
  $('nogpu').textContent = bench.error;
});
