//! How each SidecarSet's pods are injected (`--injection=policy|auto`), as the policy keeper
//! last compiled and probed the MutatingAdmissionPolicy: what the controller turns into each
//! SidecarSet's `InjectedByPolicy` condition.

use sidecarset_core::policy::Modes;

/// The keeper's last word on the policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InjectionModes {
    /// Which SidecarSets the policy holds, and why the others are left to the webhook.
    pub modes: Modes,
    /// The API server serves MutatingAdmissionPolicy (admissionregistration.k8s.io/v1).
    pub served: bool,
    /// A dry-run probe showed the API server applying the compiled version.
    pub active: bool,
}

/// How one SidecarSet's pods are injected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Injection {
    /// By the API server, the policy's current version applied.
    Policy,
    /// Compiled into the policy, but the API server was not yet seen applying that version:
    /// the webhook injects meanwhile (its match condition leaves out only pods that record
    /// the SidecarSet).
    PolicyPending,
    /// By the webhook, for the reason given.
    Webhook(String),
    /// By the webhook: the API server does not serve MutatingAdmissionPolicy.
    NotServed,
}

impl InjectionModes {
    /// How `sidecarset` is injected.
    pub fn of(&self, sidecarset: &str) -> Injection {
        if !self.served {
            Injection::NotServed
        } else if self.modes.policy.contains(sidecarset) {
            if self.active {
                Injection::Policy
            } else {
                Injection::PolicyPending
            }
        } else {
            Injection::Webhook(self.modes.webhook.get(sidecarset).cloned().unwrap_or_else(
                || "not in the compiled policy (its injection is paused, or it changed since the policy was compiled)".into(),
            ))
        }
    }

    /// The SidecarSets whose injection differs between `old` and `new` (None: webhook mode, no
    /// condition), among `names` (every SidecarSet of the view).
    pub fn changed<'a>(
        old: Option<&InjectionModes>,
        new: Option<&InjectionModes>,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Vec<String> {
        names
            .into_iter()
            .filter(|n| old.map(|m| m.of(n)) != new.map(|m| m.of(n)))
            .map(str::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modes(
        policy: &[&str],
        webhook: &[(&str, &str)],
        served: bool,
        active: bool,
    ) -> InjectionModes {
        InjectionModes {
            modes: Modes {
                policy: policy.iter().map(|s| s.to_string()).collect(),
                webhook: webhook
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
            served,
            active,
        }
    }

    #[test]
    fn each_sidecarset_gets_its_injection() {
        let m = modes(
            &["a"],
            &[("b", "spec.containers[0].transferEnv ...")],
            true,
            true,
        );
        let cases = [
            (m.clone(), "a", Injection::Policy),
            (
                InjectionModes {
                    active: false,
                    ..m.clone()
                },
                "a",
                Injection::PolicyPending,
            ),
            (
                m.clone(),
                "b",
                Injection::Webhook("spec.containers[0].transferEnv ...".into()),
            ),
            (
                InjectionModes {
                    served: false,
                    ..m.clone()
                },
                "a",
                Injection::NotServed,
            ),
        ];
        for (m, name, want) in cases {
            assert_eq!(m.of(name), want, "{name} in {m:?}");
        }
        assert!(matches!(m.of("c"), Injection::Webhook(r) if r.contains("paused")));
    }

    #[test]
    fn only_sidecarsets_whose_injection_changed_are_named() {
        let before = modes(&["a", "b"], &[("c", "x")], true, false);
        let after = modes(&["a", "b"], &[("c", "x")], true, true);
        let names = ["a", "b", "c", "d"];
        // Activation changes a and b (pending → policy); c and d stay on the webhook.
        assert_eq!(
            InjectionModes::changed(Some(&before), Some(&after), names),
            ["a", "b"]
        );
        assert!(InjectionModes::changed(Some(&after), Some(&after), names).is_empty());
        // From webhook mode (no condition) every SidecarSet changes, and back.
        assert_eq!(InjectionModes::changed(None, Some(&after), names).len(), 4);
        assert_eq!(InjectionModes::changed(Some(&after), None, names).len(), 4);
        let moved = modes(&["a"], &[("b", "y"), ("c", "x")], true, true);
        assert_eq!(
            InjectionModes::changed(Some(&after), Some(&moved), names),
            ["b"]
        );
    }
}
