// kiln on the browser's WebGPU adapter: the wasm module (`init`), then the
// device (`Gpu.init`). Throws an error a page can show as it is when the
// browser has no WebGPU or no adapter.
export async function startGpu(init, Gpu) {
  if (!navigator.gpu) {
    throw new Error('WebGPU is not available in this browser (navigator.gpu is missing). ' +
      'Use a recent Chrome, Edge or Firefox with WebGPU enabled.');
  }
  await init();
  try {
    return await Gpu.init();
  } catch (e) {
    throw new Error(`No WebGPU adapter: ${e.message ?? e}`);
  }
}

// What the pages show about the adapter: kiln's Device info (from wasm)
// plus the browser's GPUAdapterInfo, which has the vendor and architecture
// that wgpu does not carry over (its `name` is the often-empty description).
export async function describeAdapter(gpu) {
  const info = JSON.parse(gpu.info());
  const adapter = await navigator.gpu.requestAdapter();
  const web = adapter?.info ?? {};
  const detail = { ...info, vendor: web.vendor ?? '', architecture: web.architecture ?? '', description: web.description ?? '' };
  const what = [detail.name || detail.description, detail.vendor, detail.architecture].filter(Boolean).join(' ');
  detail.label = `${what || 'unnamed adapter'} (kiln backend ${detail.backend}, ${detail.device_type}; ${detail.f16_path})`;
  return detail;
}
