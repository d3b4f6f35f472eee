//! Rollout decisions (pure): which pods to upgrade in place now.
