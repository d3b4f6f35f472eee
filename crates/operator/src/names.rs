//! The names the operator goes by in the API server: the field managers of what it writes, its
//! webhooks, and which webhook configurations carry them. A leaf: what registers the webhooks
//! (`registration`) and what follows their caBundle (`tls::follow`) both name them from here.

/// The field manager of everything the operator writes with server-side apply (caBundle, CRD
/// conversion settings, webhook configurations in URL mode).
pub const FIELD_MANAGER: &str = "sidecarset-operator";

/// The field manager of the pod webhook's `matchConditions`: separate, so that applying only the
/// conditions does not release the fields [`FIELD_MANAGER`] owns (caBundle).
pub const MATCH_CONDITIONS_FIELD_MANAGER: &str = "sidecarset-operator-match-conditions";

/// The pod webhook for CREATE (injection).
pub const POD_CREATE_WEBHOOK: &str = "mpod.sidecarset-operator.io";
/// The pod webhook for UPDATE (keeps injection annotations truthful), failing open.
pub const POD_UPDATE_WEBHOOK: &str = "mpod-update.sidecarset-operator.io";

/// Which MutatingWebhookConfiguration(s) carry the pod CREATE webhook whose match condition is
/// kept: one by name (the chart's, `--webhook-config-name`), or every one a label selector
/// finds (`--webhook-config-selector`): OLM creates its configurations with `generateName`, so
/// their names end in a random suffix, and labels each with the webhook definition it came
/// from (`olm.webhook-description-generate-name=mpod.sidecarset-operator.io`). While OLM
/// replaces a CSV there are two (the old CSV's and the new one's), and both are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookConfigs {
    Named(String),
    Selected(String),
}

impl WebhookConfigs {
    /// `--webhook-config-selector` when given, else `--webhook-config-name`.
    pub fn from_args(name: &str, selector: Option<&str>) -> Self {
        match selector.map(str::trim).filter(|s| !s.is_empty()) {
            Some(s) => WebhookConfigs::Selected(s.to_string()),
            None => WebhookConfigs::Named(name.to_string()),
        }
    }
}

impl From<&str> for WebhookConfigs {
    fn from(name: &str) -> Self {
        WebhookConfigs::Named(name.to_string())
    }
}

impl std::fmt::Display for WebhookConfigs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WebhookConfigs::Named(n) => write!(f, "{n}"),
            WebhookConfigs::Selected(s) => write!(f, "the configurations labelled {s}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_wins_over_the_name_when_given() {
        assert_eq!(
            WebhookConfigs::from_args("sso", None),
            WebhookConfigs::Named("sso".into())
        );
        assert_eq!(
            WebhookConfigs::from_args("sso", Some(" ")),
            WebhookConfigs::Named("sso".into())
        );
        assert_eq!(
            WebhookConfigs::from_args("sso", Some("a=b")),
            WebhookConfigs::Selected("a=b".into())
        );
    }
}
