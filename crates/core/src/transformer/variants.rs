//! The parts of a block that today's served models vary: a mixture of experts in place of the
//! dense MLP (Mixtral, Qwen-MoE, DeepSeek-V2/V3) and multi-head latent attention in place of
//! q/k/v projections (DeepSeek-V2/V3). This file holds their shapes, their validation and the
//! routing assumption; `block` turns them into GEMMs and element-wise ops.
//!
//! Routing is not simulated: the expected number of distinct experts a batch touches assumes
//! every token picks its `k` experts uniformly and independently, `E·(1 − (1 − k/E)^T)`, beside
//! the worst case `min(E, T·k)`. Left out: load imbalance, capacity factors and dropped
//! tokens, group-limited routing's effect on which experts are touched, expert-parallel
//! placement (see the multi-device model).

use crate::error::{CoreError, Result};
use serde::{Deserialize, Serialize};

/// How many distinct experts a batch is assumed to touch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// Uniform independent routing: `E·(1 − (1 − k/E)^T)` experts, rounded up.
    #[default]
    Expected,
    /// Every token's experts distinct: `min(E, T·k)`.
    WorstCase,
}

/// A mixture of experts replacing the block's dense MLP: a router, `experts` routed experts
/// of which each token uses `top_k`, and optional shared experts every token uses. Every
/// expert has the block's MLP form (SwiGLU for every family read from a config).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Moe {
    /// Routed experts, E.
    pub experts: u64,
    /// Experts each token is routed to, k.
    pub top_k: u64,
    /// Hidden width of one routed expert, F_e.
    pub expert_d_ff: u64,
    /// Shared experts, always active (default 0).
    #[serde(default)]
    pub shared_experts: u64,
    /// Total hidden width of the shared experts, F_s (default `shared_experts · F_e`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_d_ff: Option<u64>,
    /// The router carries a per-expert bias (DeepSeek-V3's `e_score_correction_bias`):
    /// E parameters (default false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub router_bias: bool,
    /// A sigmoid gate on the shared expert's output (Qwen-MoE's `shared_expert_gate`):
    /// D parameters (default false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_expert_gate: bool,
    /// The distinct-experts assumption (default `expected`).
    #[serde(default)]
    pub routing: Routing,
}

impl Moe {
    /// F_s: `shared_d_ff`, or `shared_experts · expert_d_ff`.
    pub fn effective_shared_d_ff(&self) -> Result<u64> {
        match self.shared_d_ff {
            Some(f) => Ok(f),
            None => self
                .shared_experts
                .checked_mul(self.expert_d_ff)
                .ok_or_else(|| CoreError::overflow("shared_experts · expert_d_ff")),
        }
    }

    /// Experts ≥ 1, 1 ≤ top_k ≤ experts, expert width ≥ 1, shared width consistent.
    pub fn validate(&self) -> Result<()> {
        if self.experts == 0 {
            return Err(CoreError::invalid("moe.experts", 0, "must be at least 1"));
        }
        if self.top_k == 0 || self.top_k > self.experts {
            return Err(CoreError::invalid(
                "moe.top_k",
                self.top_k,
                format!("must be between 1 and moe.experts = {}", self.experts),
            ));
        }
        if self.expert_d_ff == 0 {
            return Err(CoreError::invalid(
                "moe.expert_d_ff",
                0,
                "must be at least 1",
            ));
        }
        match (self.shared_experts, self.shared_d_ff) {
            (0, Some(f)) if f > 0 => Err(CoreError::invalid(
                "moe.shared_d_ff",
                f,
                "needs moe.shared_experts ≥ 1",
            )),
            (s, Some(0)) if s > 0 => Err(CoreError::invalid(
                "moe.shared_d_ff",
                0,
                "must be at least 1 when there are shared experts",
            )),
            _ => self.effective_shared_d_ff().map(|_| ()),
        }
    }

    /// Distinct experts a batch of `tokens` touches under [`Moe::routing`]:
    /// expected `⌈E·(1 − (1 − k/E)^T)⌉` (at least `min(k, E)`), or worst case `min(E, T·k)`;
    /// never more than `min(E, T·k)`.
    ///
    /// ```
    /// use tensorforge_core::transformer::Moe;
    /// let m = Moe { experts: 8, top_k: 2, expert_d_ff: 1, shared_experts: 0, shared_d_ff: None,
    ///     router_bias: false, shared_expert_gate: false, routing: Default::default() };
    /// // One token touches exactly k = 2 experts; two tokens 8·(1 − 0.75²) = 3.5 → 4.
    /// assert_eq!(m.experts_touched(1), 2);
    /// assert_eq!(m.experts_touched(2), 4);
    /// ```
    pub fn experts_touched(&self, tokens: u64) -> u64 {
        let (e, k) = (self.experts, self.top_k.min(self.experts));
        let worst = tokens.saturating_mul(k).min(e);
        match self.routing {
            Routing::WorstCase => worst,
            Routing::Expected => {
                let miss = 1.0 - k as f64 / e as f64;
                let expected = e as f64 * (1.0 - miss.powf(tokens as f64));
                // The tolerance keeps an exact integer (T = 1: exactly k) from rounding up.
                let up = (expected - 1e-9).ceil().max(0.0) as u64;
                up.max(k.min(worst)).min(worst)
            }
        }
    }
}

/// How decode computes latent attention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MlaForm {
    /// Up-project every cached latent to per-head keys and values (`kv_b` over all L
    /// positions), then attend as multi-head attention.
    #[default]
    Naive,
    /// Fold the key up-projection into the query and the value up-projection into the output:
    /// attend directly over the cached latents (`q_absorb`, `v_absorb`).
    Absorbed,
}

/// Multi-head latent attention (DeepSeek-V2/V3): queries through an optional low-rank latent,
/// keys and values through a `kv_lora_rank` latent that is what the KV cache holds, with a
/// decoupled rotary part of `qk_rope_head_dim` shared by all heads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mla {
    /// Query latent width (None: queries projected directly from the hidden state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q_lora_rank: Option<u64>,
    /// KV latent width, the cached `c_kv`.
    pub kv_lora_rank: u64,
    /// Per-head query/key width without rotary.
    pub qk_nope_head_dim: u64,
    /// Rotary width of queries and of the one shared rotary key.
    pub qk_rope_head_dim: u64,
    /// Per-head value width.
    pub v_head_dim: u64,
    /// Decode form (default `naive`).
    #[serde(default)]
    pub form: MlaForm,
}

impl Mla {
    /// Every width ≥ 1 (the rotary width may be 0).
    pub fn validate(&self) -> Result<()> {
        for (f, v) in [
            ("mla.kv_lora_rank", self.kv_lora_rank),
            ("mla.qk_nope_head_dim", self.qk_nope_head_dim),
            ("mla.v_head_dim", self.v_head_dim),
        ] {
            if v == 0 {
                return Err(CoreError::invalid(f, 0, "must be at least 1"));
            }
        }
        if self.q_lora_rank == Some(0) {
            return Err(CoreError::invalid(
                "mla.q_lora_rank",
                0,
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// Per-head query/key width, `qk_nope_head_dim + qk_rope_head_dim`.
    pub fn qk_head_dim(&self) -> Result<u64> {
        self.qk_nope_head_dim
            .checked_add(self.qk_rope_head_dim)
            .ok_or_else(|| CoreError::overflow("qk_nope_head_dim + qk_rope_head_dim"))
    }

    /// Cached elements per token per layer: `kv_lora_rank + qk_rope_head_dim`.
    pub fn cache_elements_per_token(&self) -> Result<u64> {
        self.kv_lora_rank
            .checked_add(self.qk_rope_head_dim)
            .ok_or_else(|| CoreError::overflow("kv_lora_rank + qk_rope_head_dim"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moe(e: u64, k: u64, routing: Routing) -> Moe {
        Moe {
            experts: e,
            top_k: k,
            expert_d_ff: 16,
            shared_experts: 0,
            shared_d_ff: None,
            router_bias: false,
            shared_expert_gate: false,
            routing,
        }
    }

    #[test]
    fn experts_touched_hand_checked() {
        let m = moe(8, 2, Routing::Expected);
        // T = 1: 8·(1 − 0.75) = 2 exactly. T = 4: 8·(1 − 0.75⁴) = 8·0.68359 = 5.47 → 6.
        assert_eq!(m.experts_touched(1), 2);
        assert_eq!(m.experts_touched(4), 6);
        // T = 64: 8·(1 − 0.75⁶⁴) ≈ 8 − 8·1e-8 → 8.
        assert_eq!(m.experts_touched(64), 8);
        // DeepSeek-V3 routing, E = 256, k = 8, T = 32: 256·(1 − (31/32)³²) = 256·0.6379
        // = 163.3 → 164; worst case min(256, 256) = 256.
        assert_eq!(moe(256, 8, Routing::Expected).experts_touched(32), 164);
        assert_eq!(moe(256, 8, Routing::WorstCase).experts_touched(32), 256);
        assert_eq!(moe(256, 8, Routing::WorstCase).experts_touched(3), 24);
    }

    #[test]
    fn bad_moe_and_mla_name_the_field() {
        let e = moe(8, 9, Routing::Expected)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("moe.top_k") && e.contains('9'), "{e}");
        let e = Mla {
            q_lora_rank: Some(0),
            kv_lora_rank: 512,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
            form: MlaForm::Naive,
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("mla.q_lora_rank"), "{e}");
    }
}
