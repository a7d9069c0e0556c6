//! README.md's Rust snippets are compiled code: each appears here token
//! for token (whitespace aside), or is kiln's quickstart example, inside a
//! function that compiles with the tests; those that are cheap on the CPU
//! reference also run.

const README: &str = include_str!("../../README.md");
const QUICKSTART: &str = include_str!("../../kiln/examples/quickstart.rs");
const THIS_FILE: &str = include_str!("readme.rs");

/// The ```rust blocks of `markdown`.
fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut open: Option<String> = None;
    for line in markdown.lines() {
        match (&mut open, line.trim_end()) {
            (None, "```rust") => open = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                open = None;
            }
            (Some(block), _) => block.push_str(&format!("{line}\n")),
            (None, _) => {}
        }
    }
    blocks
}

/// `text` without its whitespace: rustfmt lays out the hosts below (the
/// comments' alignment, where long lines break), README keeps its own.
fn squeezed(text: &str) -> String {
    text.split_whitespace().collect()
}

#[test]
fn every_rust_snippet_of_the_readme_is_compiled_here_or_is_the_quickstart() {
    let blocks = rust_blocks(README);
    assert!(blocks.len() >= 10, "found {} snippets", blocks.len());
    let here = squeezed(THIS_FILE);
    for block in blocks {
        if block != QUICKSTART {
            let found = here.contains(&squeezed(&block));
            assert!(found, "README.md's snippet is not in tests/tests/readme.rs:\n{block}");
        }
    }
}

mod intro {
    use kiln::prelude::*;

    fn main() -> Result<()> {
        kiln::block_on(async {
            let dev = Device::gpu().await?; // best adapter, or $KILN_ADAPTER
            let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
            let b = Tensor::from_slice(&dev, &[10.0f32, 20.0, 30.0], &[3])?;
            let y = (&x + &b)?.matmul(&x.t()?)?.softmax(-1)?; // lazy: nothing has run yet
            println!("{:?}", y.to_vec::<f32>().await?); // realize + async readback
            Ok(())
        })
    }

    #[test]
    fn the_intro_runs_on_the_best_adapter() {
        main().unwrap();
    }
}

mod fusion_and_jit {
    use kiln::prelude::*;

    async fn snippet(dev: &Device) -> Result<Tensor> {
        let x = Tensor::from_slice(dev, &[1.0f32, -2.0], &[1, 2])?;
        let w = Tensor::from_slice(dev, &[1.0f32, 1.0, 1.0, -1.0], &[2, 2])?;
        let step = kiln::jit(|(x, w): &(Tensor, Tensor)| x.matmul(w)?.relu());
        let out = step.call(&(x, w)).await?; // captured; later calls with these shapes replay
        Ok(out)
    }

    #[test]
    fn the_jit_snippet_runs() {
        let out = kiln::block_on(snippet(&Device::cpu())).unwrap();
        assert_eq!(kiln::block_on(out.to_vec::<f32>()).unwrap(), [0.0, 3.0]);
    }
}

mod gradients {
    fn snippet(dev: &kiln::Device) -> kiln::Result<Vec<usize>> {
        let x = kiln::Tensor::ones(dev, &[4, 3], kiln::DType::F32)?;
        let params = Linear { weight: x.t()?, bias: kiln::Tensor::zeros(dev, &[4], kiln::DType::F32)? };
        use kiln::prelude::*;

        #[derive(Tree)]
        struct Linear {
            weight: Tensor,
            bias: Tensor,
        }

        fn loss(p: &Linear, x: &Tensor) -> Result<Tensor> {
            (x.matmul(&p.weight) + &p.bias)?.tanh()?.mean(&[], false)
        }
        let (value, grads) = value_and_grad(|p: &Linear| loss(p, &x))(&params)?;
        // grads.weight, grads.bias: a Linear of the parameters' shapes
        assert_eq!(value.shape(), [0usize; 0]);
        Ok([grads.weight.shape(), grads.bias.shape()].concat())
    }

    #[test]
    fn the_gradients_snippet_runs() {
        assert_eq!(snippet(&kiln::Device::cpu()).unwrap(), [3, 4, 4]);
    }
}

mod batching {
    use kiln::prelude::*;
    use kiln_mnist::per_example::clipped_mean;
    use kiln_nn::loss::cross_entropy;
    use kiln_nn::{Layer, Sequential, mlp};

    async fn snippet(dev: &Device) -> Result<Vec<Tensor>> {
        let model = mlp(dev, Key::new(0), &[6, 5, 3], Layer::Relu)?;
        let x = kiln::random::uniform(dev, Key::new(1), &[64, 6], DType::F32, -1.0, 1.0)?;
        let labels = kiln::random::randint(dev, Key::new(2), &[64], 0, 3)?;
        let grad_of_one = |(m, x, y): &(Sequential, Tensor, Tensor)| {
            let (x, y) = (x.unsqueeze(0)?, y.unsqueeze(0)?);
            kiln::grad(|m: &Sequential| cross_entropy(&m.forward(&x)?, &y))(m)
        };
        let mut in_axes = vec![None; model.leaves().len()]; // the model is shared
        in_axes.extend([Some(0), Some(0)]); // images and labels are batched
        let grads = kiln::vmap(grad_of_one, in_axes, vec![0])(&(model.clone(), x, labels))?;
        // every leaf of `grads` has a leading batch axis of 64. Each example's
        // gradient scaled to norm at most 1, then averaged (`clipped_mean`, ten
        // lines in mnist/src/per_example.rs), and an SGD step on the mean:
        let (mean, norms) = clipped_mean(&grads, 1.0)?; // norms: [64]
        let step: Vec<Tensor> =
            model.leaves().iter().zip(mean.leaves()).map(|(p, g)| p.sub(&g.mul_scalar(0.1)?)).collect::<Result<_>>()?;
        Tensor::realize_all(&step.iter().chain([&norms]).collect::<Vec<_>>()).await?; // one submit
        Ok([vec![norms], step].concat())
    }

    #[test]
    fn the_per_example_gradients_snippet_runs() {
        let out = kiln::block_on(snippet(&Device::cpu())).unwrap();
        assert_eq!(out[0].shape(), [64]);
        assert_eq!(out[1].shape(), [6, 5]);
    }
}

mod keys_and_layers {
    use kiln::prelude::*;

    fn keys(dev: Device) -> Result<Tensor> {
        let keys = kiln::random::keys(&dev, &Key::new(0).split(64))?; // [64, 2]
        let noise = kiln::vmap(
            |k: &Vec<Tensor>| Ok(vec![kiln::random::normal(&dev, &k[0], &[10], DType::F32, 0.0, 1.0)?]),
            vec![Some(0)],
            vec![0],
        )(&vec![keys])?; // [64, 10]; row i = normal(keys[i])
        Ok(noise[0].clone())
    }

    fn layers(dev: Device) -> Result<Vec<usize>> {
        use kiln::prelude::*;
        use kiln_nn::{Layer, loss, mlp};

        let key = Key::new(0);
        let [init_key, data_key] = [key.fold_in(0), key.fold_in(1)];
        let model = mlp(&dev, init_key, &[784, 128, 10], Layer::Relu)?;
        let x = kiln::random::uniform(&dev, data_key, &[32, 784], DType::F32, 0.0, 1.0)?;
        let labels = kiln::random::randint(&dev, data_key.fold_in(1), &[32], 0, 10)?;
        let (l, g) = value_and_grad(|m: &kiln_nn::Sequential| loss::cross_entropy(&m.forward(&x)?, &labels))(&model)?;
        assert_eq!(l.numel(), 1);
        Ok(g.leaves()[0].shape().to_vec())
    }

    #[test]
    fn the_keys_and_layers_snippets_run() {
        assert_eq!(keys(Device::cpu()).unwrap().shape(), [64, 10]);
        assert_eq!(layers(Device::cpu()).unwrap(), [784, 128]);
    }
}

mod low_precision {
    use kiln::prelude::*;
    use kiln_nn::{Layer, Sequential, loss, mlp};

    async fn snippet(dev: &Device) -> Result<Tensor> {
        let model = mlp(dev, Key::new(0), &[6, 5, 3], Layer::Relu)?;
        let x = kiln::random::uniform(dev, Key::new(1), &[8, 6], DType::F32, -1.0, 1.0)?;
        let labels = kiln::random::randint(dev, Key::new(2), &[8], 0, 3)?;
        use kiln_nn::optim::{LossScaleConfig, adam, dynamic_loss_scale, training_step};

        let opt = dynamic_loss_scale(adam(1e-3, 0.9, 0.999, 1e-8), LossScaleConfig::default());
        let state = opt.init(&model)?;
        let step = kiln::jit(training_step(opt, |m: &Sequential, (x, y): &(Tensor, Tensor)| {
            let half = m.map_leaves(|_, w| w.cast(DType::F16))?; // f16 compute, f32 masters
            let logits = half.forward(&x.cast(DType::F16)?)?.cast(DType::F32)?;
            loss::cross_entropy(&logits, y)
        }));
        let (loss, model, state) = step.call(&(model, state, (x, labels))).await?;
        assert_eq!(model.leaves()[0].dtype(), DType::F32);
        assert_eq!(state.scale.shape(), [0usize; 0]);
        Ok(loss)
    }

    #[test]
    fn the_mixed_precision_snippet_runs() {
        let loss = kiln::block_on(snippet(&Device::cpu())).unwrap();
        assert!(kiln::block_on(loss.item::<f32>()).unwrap().is_finite());
    }
}

/// Compiled only: the GPT demo's run, a mesh of two adapters, and a
/// Hugging Face model and its LoRA fine-tune (run on the same fixture in
/// models/tests and native-demo/tests).
#[allow(dead_code)]
mod compiled_only {
    use kiln::prelude::*;
    use kiln_nn::Sequential;

    async fn hugging_face(dev: Device) -> Result<()> {
        let dir = std::path::Path::new("models/tests/fixtures/gpt2");
        let model = kiln_models::Model::load(dir, &dev)?;
        let tokenizer = kiln_models::Tokenizer::from_folder(dir)?;
        let prompt = tokenizer.encode("In the beginning")?;
        let decoded = kiln_models::Decoder::new(model).greedy(&prompt, 20).await?;
        println!("{} ({:.0} tokens/s)", tokenizer.decode(&decoded.tokens)?, decoded.decode_rate());
        Ok(())
    }

    async fn lora(dev: Device) -> std::result::Result<(), Box<dyn std::error::Error>> {
        let dir = std::path::Path::new("models/tests/fixtures/gpt2");
        let model = kiln_models::Model::load(dir, &dev)?;
        let text = std::fs::read_to_string("data/kjv/genesis-ruth.txt")?;
        let tokens = kiln_models::Tokenizer::from_folder(dir)?.encode(&text)?;
        let config = kiln_models::FineTuneConfig::new(8); // rank 8 on every block projection
        let mut run = kiln_models::FineTune::new(&model, &tokens, config)?;
        for _ in 0..200 {
            run.step().await?; // Adam on the adapters: one submit per step
        }
        println!("validation loss {} nats/token", run.validation_loss().await?);
        run.adapters().save("out/lora").await?;
        let tuned = model.with_lora(run.adapters())?; // forward, Decoder, quantize as before
        let _ = tuned;
        Ok(())
    }

    async fn gpt(dev: Device) -> Result<String> {
        use kiln_gpt::{Corpus, GptTrainer, Sampling, TrainConfig, generate};

        let corpus = std::sync::Arc::new(Corpus::load("data/kjv/genesis-ruth.txt")?);
        let mut trainer = GptTrainer::new(&dev, corpus.clone(), TrainConfig::demo(corpus.vocab.len()))?;
        let losses = trainer.run(100).await?; // nats, one submit per step
        let bits = trainer.evaluate().await?; // validation bits/char
        let sampling = Sampling { temperature: 0.8, top_k: Some(10), key: Key::new(7), cached: true };
        let text = generate(&trainer.model()?, &corpus.vocab, "And God said", 200, sampling).await?;
        Ok(format!("{losses:?} {bits} {text}"))
    }

    async fn data_parallel(
        lavapipe: Device,
        swiftshader: Device,
        x: Tensor,
        labels: Tensor,
        model: Sequential,
    ) -> Result<()> {
        use kiln_shard::{Mesh, Replicas, ShardTensor, Sharding};

        let mesh = Mesh::local(vec![lavapipe, swiftshader])?; // two devices, two ranks
        let xs = x.shard(&mesh, Sharding::Split(0)).await?; // each rank holds half the rows
        let ys = labels.shard(&mesh, Sharding::Split(0)).await?;
        let params = Replicas::new(&mesh, &model).await?; // a copy of the model per rank
        let (loss, grads) = kiln_shard::value_and_grad(&params, |p| {
            xs.map_with(p, "forward", |m, x| m.forward(x))?.cross_entropy(&ys) // partial per rank
        })
        .await?; // loss and gradients all-reduced
        let _ = (loss, grads);
        Ok(())
    }
}
