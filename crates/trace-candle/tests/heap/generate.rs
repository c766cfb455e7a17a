//! Greedy generation through a capture, shared by the heap tests of real generating models.

use candle_core::{Device, Tensor};
use trace_candle::Capture;

/// Generates `steps` tokens greedily from a 16-token prompt (the prompt at step 0, then the
/// last token with the model's KV cache): each forward is the captured op `op` and ends a
/// step. `forward(input, pos)` returns the logits of the last position (`[1, vocab]` or
/// `[1, 1, vocab]`).
pub(crate) fn generate(
    capture: &Capture,
    op: &str,
    steps: usize,
    mut forward: impl FnMut(&Tensor, usize) -> candle_core::Result<Tensor>,
) {
    let mut tokens: Vec<u32> = (0..16u32).map(|i| (i * 37 + 11) % 1000).collect();
    let mut pos = 0;
    for step in 0..steps {
        let from = if step == 0 { 0 } else { tokens.len() - 1 };
        let input = Tensor::new(&tokens[from..], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let logits = capture.op(op, &[&input], || forward(&input, pos)).unwrap();
        pos += tokens.len() - from;
        let next = logits
            .flatten_all()
            .unwrap()
            .argmax(0)
            .unwrap()
            .to_scalar::<u32>()
            .unwrap();
        tokens.push(next);
        // The step boundary reaches the tracker at once (`Capture::step` tells it), so each
        // short step has an account of its own.
        capture.step();
    }
}
