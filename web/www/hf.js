// The Hugging Face page: a GPT-2 or Llama folder read from files the user
// picks or drops (kiln-models through kiln's wasm API), generation with
// prefill and decode rates, and LoRA fine-tuning with its loss curve and
// the adapters to download. window.hf is what the page (and the
// end-to-end test) reads; window.hf.model is the HfModel.
import init, { Gpu, HfModel } from './pkg/kiln_web.js';
import { describeAdapter, startGpu } from './adapter.js';
import { drawCurves, oneAtATime, yieldToBrowser } from './training.js';

const $ = (id) => document.getElementById(id);
const STEPS_PER_CHUNK = 5;
const EVALUATIONS = 4;

const hf = { status: 'loading', description: null, model: null, generated: null, losses: [], validation: [], adapters: null, error: null };
window.hf = hf;

let gpu;
const exclusive = oneAtATime();

function setStatus(s) { hf.status = s; $('status').textContent = hf.description ? `${hf.description} · ${s}` : s; }

function fail(message) {
  hf.error = message;
  setStatus('error');
  $('nogpu').hidden = false;
  $('nogpu').textContent = message;
}

// Every file of a drop: files as they are, folders walked.
async function droppedFiles(items) {
  const files = [];
  const walk = async (entry) => {
    if (entry.isFile) {
      files.push(await new Promise((ok, bad) => entry.file(ok, bad)));
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (let batch; (batch = await new Promise((ok, bad) => reader.readEntries(ok, bad))).length;) {
        for (const e of batch) await walk(e);
      }
    }
  };
  const entries = [...items].map((i) => i.webkitGetAsEntry?.()).filter(Boolean);
  for (const e of entries) await walk(e);
  return files;
}

async function loadModel(files) {
  files = [...files].filter((f) => !f.name.startsWith('.'));
  if (files.some((f) => f.name === 'adapter_config.json') && hf.model) return loadAdapters(files);
  setStatus(`reading ${files.length} files…`);
  const bytes = await Promise.all(files.map(async (f) => new Uint8Array(await f.arrayBuffer())));
  await exclusive(async () => {
    hf.model?.free();
    hf.model = null;
    hf.description = null;
    hf.model = new HfModel(gpu, files.map((f) => f.name), bytes);
  });
  hf.description = hf.model.description;
  $('quantize').value = 'none';
  setStatus('ready');
  for (const b of ['generate', 'finetune']) $(b).disabled = false;
}

async function loadAdapters(files) {
  const byName = Object.fromEntries([...files].map((f) => [f.name, f]));
  const config = byName['adapter_config.json'], weights = byName['adapter_model.safetensors'];
  if (!config || !weights) throw new Error('adapters need adapter_config.json and adapter_model.safetensors');
  const n = await exclusive(async () => hf.model.load_adapters(await config.text(), new Uint8Array(await weights.arrayBuffer())));
  setStatus(`ready, with LoRA adapters on ${n} projections`);
}

async function generate() {
  const tokens = Number($('tokens').value), temperature = Number($('temperature').value);
  const topK = Number($('topk').value) >>> 0, topP = Number($('topp').value), seed = Number($('seed').value) >>> 0;
  $('generated').textContent = 'generating…';
  const out = JSON.parse(await exclusive(() => hf.model.generate($('prompt').value, tokens, temperature, topK, topP, seed)));
  hf.generated = out;
  $('generated').textContent = out.text;
  $('rates').textContent = `prefill: ${out.prompt_tokens} tokens in ${out.prefill_seconds.toFixed(2)} s ` +
    `(${(out.prompt_tokens / out.prefill_seconds).toFixed(1)} tokens/s) · decode: ${out.decode_rate.toFixed(1)} tokens/s ` +
    `after the first step (${out.first_step_seconds.toFixed(2)} s, capturing it)`;
}

async function quantize() {
  await exclusive(() => hf.model.quantize($('quantize').value));
  setStatus(`ready, projections ${$('quantize').value === 'none' ? 'as stored' : 'in ' + $('quantize').value}`);
}

function drawChart(steps) {
  const max = Math.max(1, ...hf.losses.map(([, l]) => l), ...hf.validation.map(([, l]) => l));
  drawCurves($('chart'), Math.max(10, steps), [
    { points: hf.losses, max, color: '#c33', label: `training loss, nats/token (0–${max.toFixed(1)})` },
    { points: hf.validation, max, color: '#36c', label: 'validation loss' },
  ]);
}

async function finetune() {
  $('finetune').disabled = true;
  const corpus = $('corpus').files[0];
  const text = corpus ? await corpus.text() : await (await fetch('data/kjv.txt')).text();
  const steps = Number($('steps').value);
  const options = JSON.stringify({ rank: Number($('rank').value), lr: Number($('lr').value), context: Number($('context').value), batch: Number($('batch').value), seed: Number($('seed').value) });
  hf.losses = [];
  hf.validation = [];
  hf.adapters = null;
  const parameters = await exclusive(() => hf.model.start_finetune(text, options));
  setStatus(`fine-tuning ${parameters} adapter parameters`);
  const validate = async (step) => {
    hf.validation.push([step, await exclusive(() => hf.model.validation_loss())]);
  };
  await validate(0);
  let done = 0, ms = 0;
  while (done < steps) {
    const n = Math.min(STEPS_PER_CHUNK, steps - done);
    const t0 = performance.now();
    const losses = await exclusive(() => hf.model.finetune_steps(n));
    ms += performance.now() - t0;
    losses.forEach((l, i) => hf.losses.push([done + i + 1, l]));
    done += n;
    if (done % Math.ceil(steps / EVALUATIONS) < n || done === steps) await validate(done);
    const valid = hf.validation.at(-1)[1];
    $('tuning').textContent = `step ${done} of ${steps} · loss ${losses.at(-1).toFixed(3)} · validation ${valid.toFixed(3)} nats/token · ${(1000 * done / ms).toFixed(1)} steps/s`;
    drawChart(steps);
    await yieldToBrowser();
  }
  const [config, weights] = await exclusive(() => hf.model.finish_finetune());
  hf.adapters = { config, weights };
  $('download').disabled = false;
  $('finetune').disabled = false;
  setStatus('ready, with the fine-tuned adapters');
}

function download() {
  for (const [name, data] of [['adapter_config.json', hf.adapters.config], ['adapter_model.safetensors', hf.adapters.weights]]) {
    const a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob([data]));
    a.download = name;
    a.click();
  }
}

async function main() {
  drawChart(10);
  try {
    gpu = await startGpu(init, Gpu);
  } catch (e) {
    fail(e.message);
    return;
  }
  hf.adapter = await describeAdapter(gpu);
  $('adapter').textContent = hf.adapter.label;
  const guard = (f) => (...a) => f(...a).catch((e) => fail(`${e.message ?? e}`));
  // Each picker is cleared once read, so that choosing the same files
  // again loads them again.
  const picked = (load) => guard(async (e) => {
    const files = [...e.target.files];
    e.target.value = '';
    await load(files);
  });
  $('files').onchange = picked(loadModel);
  $('folder').onchange = picked(loadModel);
  $('adapters').onchange = picked(loadAdapters);
  $('generate').onclick = guard(generate);
  $('quantize').onchange = guard(quantize);
  $('finetune').onclick = guard(finetune);
  $('download').onclick = download;
  document.addEventListener('dragover', (e) => e.preventDefault());
  document.addEventListener('drop', guard(async (e) => {
    e.preventDefault();
    // Entries walk dropped folders; a drop made by a script has no entries
    // but its files.
    const walked = await droppedFiles(e.dataTransfer.items);
    const files = walked.length ? walked : [...e.dataTransfer.files];
    if (files.length) await loadModel(files);
  }));
  setStatus('choose or drop a model folder');
}

main().catch((e) => fail(`${e.message ?? e}`));
