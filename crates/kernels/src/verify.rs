//! Verification sweeps (in progress).
