//! Segmented log storage for replicated log streams. No networking.
