//! Go struct layout of OpenKruise's SidecarSet types (`apps.kruise.io` v1alpha1 and v1beta1
//! declare them alike) that OpenKruise encodes: the sidecar containers and the other parts of
//! the spec a ControllerRevision records. Same conventions as [`super::core_v1`].

use super::Elem::*;
use super::Shape::*;
use super::core_v1::{CONTAINER, LOCAL_OBJECT_REFERENCE, OBJECT_FIELD_SELECTOR, VOLUME};
use super::{OMIT, PTR, Ty, f};

/// `SidecarContainer`: a core `Container` (inline), then OpenKruise's settings.
pub(crate) static SIDECAR_CONTAINER: Ty = Ty {
    fields: &[
        f("", 0, Inline, Struct(&CONTAINER)),
        f("podInjectPolicy", OMIT, One, Str),
        f(
            "upgradeStrategy",
            OMIT,
            One,
            Struct(&SIDECAR_CONTAINER_UPGRADE_STRATEGY),
        ),
        f("shareVolumePolicy", OMIT, One, Struct(&SHARE_VOLUME_POLICY)),
        f(
            "shareVolumeDevicePolicy",
            OMIT | PTR,
            One,
            Struct(&SHARE_VOLUME_POLICY),
        ),
        f("transferEnv", OMIT, Slice, Struct(&TRANSFER_ENV_VAR)),
        f(
            "resourcesPolicy",
            OMIT | PTR,
            One,
            Struct(&RESOURCES_POLICY),
        ),
    ],
};

pub(crate) static SIDECAR_CONTAINER_UPGRADE_STRATEGY: Ty = Ty {
    fields: &[
        f("upgradeType", OMIT, One, Str),
        f("hotUpgradeEmptyImage", OMIT, One, Str),
    ],
};

pub(crate) static SHARE_VOLUME_POLICY: Ty = Ty {
    fields: &[f("type", OMIT, One, Str)],
};

pub(crate) static TRANSFER_ENV_VAR: Ty = Ty {
    fields: &[
        f("sourceContainerName", OMIT, One, Str),
        f(
            "sourceContainerNameFrom",
            OMIT | PTR,
            One,
            Struct(&SOURCE_CONTAINER_NAME_SOURCE),
        ),
        f("envName", OMIT, One, Str),
        f("envNames", OMIT, Slice, Str),
    ],
};

pub(crate) static SOURCE_CONTAINER_NAME_SOURCE: Ty = Ty {
    fields: &[f(
        "fieldRef",
        OMIT | PTR,
        One,
        Struct(&OBJECT_FIELD_SELECTOR),
    )],
};

/// `ResourcesPolicy`: its mode and its expression have no omitempty.
pub(crate) static RESOURCES_POLICY: Ty = Ty {
    fields: &[
        f("targetContainersMode", 0, One, Str),
        f("targetContainersNameRegex", OMIT, One, Str),
        f("resourcesExpr", 0, One, Struct(&RESOURCES_EXPR)),
    ],
};

pub(crate) static RESOURCES_EXPR: Ty = Ty {
    fields: &[
        f("limits", OMIT | PTR, One, Struct(&RESOURCE_EXPR_CPU_MEMORY)),
        f(
            "requests",
            OMIT | PTR,
            One,
            Struct(&RESOURCE_EXPR_CPU_MEMORY),
        ),
    ],
};

/// `ResourceExprLimits` and `ResourceExprRequests` (the same fields).
pub(crate) static RESOURCE_EXPR_CPU_MEMORY: Ty = Ty {
    fields: &[f("cpu", OMIT, One, Str), f("memory", OMIT, One, Str)],
};

pub(crate) static SIDECAR_SET_PATCH_POD_METADATA: Ty = Ty {
    fields: &[
        f("annotations", OMIT, Map, Str),
        f("patchPolicy", OMIT, One, Str),
    ],
};

/// The parts of `SidecarSetSpec` that a ControllerRevision records (all `omitempty` lists).
pub(crate) static SIDECAR_SET_SPEC_REVISION: Ty = Ty {
    fields: &[
        f("initContainers", OMIT, Slice, Struct(&SIDECAR_CONTAINER)),
        f("containers", OMIT, Slice, Struct(&SIDECAR_CONTAINER)),
        f("volumes", OMIT, Slice, Struct(&VOLUME)),
        f(
            "imagePullSecrets",
            OMIT,
            Slice,
            Struct(&LOCAL_OBJECT_REFERENCE),
        ),
        f(
            "patchPodMetadata",
            OMIT,
            Slice,
            Struct(&SIDECAR_SET_PATCH_POD_METADATA),
        ),
    ],
};
