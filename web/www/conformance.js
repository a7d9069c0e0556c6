// Runs kiln-conformance's op cases, gradient checks, batching (vmap) checks and
// per-example gradient (vmap of grad) checks on this browser's WebGPU adapter against the f64 CPU reference
// compiled to wasm, one case at a time, and publishes
// the results as a table and as JSON (window.conformance, #summary).
import init, { Gpu, Conformance } from './pkg/kiln_web.js';
import { describeAdapter, startGpu } from './adapter.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const summary = { done: false, adapter: null, passed: 0, failed: 0, skipped: [], cases: [] };
window.conformance = summary;

function publish() {
  $('summary').textContent = JSON.stringify(summary);
}

async function main() {
  const gpu = await startGpu(init, Gpu);
  summary.adapter = await describeAdapter(gpu);
  $('adapter').textContent = summary.adapter.label;
  const suite = new Conformance(gpu);
  const filter = params.get('filter');
  for (let i = 0; i < suite.len; i++) {
    const op = suite.op(i), detail = suite.detail(i);
    if (filter && !op.includes(filter)) continue;
    $('status').textContent = `running ${i + 1} of ${suite.len}: ${op} [${detail}]`;
    const r = JSON.parse(await suite.run(i));
    if (r.skipped) {
      summary.skipped.push(`${op} [${detail}]: ${r.skipped}`);
      continue;
    }
    summary.cases.push({ op, detail, ...r });
    r.passed ? summary.passed++ : summary.failed++;
    const tr = document.createElement('tr');
    const cell = r.passed ? `✓ ${r.max_abs_err.toExponential(1)}` : `✗ ${r.failure}`;
    tr.innerHTML = `<td></td><td></td><td class="${r.passed ? 'pass' : 'fail'}"></td>`;
    [op, detail, cell].forEach((t, k) => (tr.children[k].textContent = t));
    $('rows').appendChild(tr);
  }
  if (!filter) {
    $('status').textContent = 'running every matmul kernel-family member';
    summary.matmul_family = JSON.parse(await gpu.matmul_family());
    $('status').textContent = 'running the reductions GPUs run (workgroup tree)';
    summary.workgroup_reductions = JSON.parse(await gpu.workgroup_reductions());
    $('status').textContent = 'running attention as one kernel (what GPUs run)';
    summary.fused_attention = JSON.parse(await gpu.fused_attention());
  }
  summary.pipelines = gpu.pipelines();
  summary.done = true;
  $('status').textContent = `${summary.passed} passed, ${summary.failed} failed`;
  publish();
}

main().catch((e) => {
  summary.error = `${e.message ?? e}`;
  summary.done = true;
  $('nogpu').hidden = false;
  $('nogpu').textContent = summary.error;
  publish();
});
