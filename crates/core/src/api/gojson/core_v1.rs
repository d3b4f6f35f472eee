//! Go struct layout of the Kubernetes types a SidecarSet embeds (containers, volumes and
//! everything they reach), as Go's encoding/json sees it: every struct's fields in declaration
//! order, embedded (inline) structs flattened, with their JSON names, whether the tag says
//! omitempty, whether the Go field is a pointer, and the field's shape.
//!
//! Generated (by reflection over k8s.io/api v0.37.0, the Kubernetes version of our k8s-openapi
//! types; OpenKruise v1.9 builds with v0.32.10, whose structs are the same minus fields added
//! since, which its decoder drops, so objects it stored never carry them). Not edited by hand:
//! for a newer Kubernetes, regenerate the whole file the same way (hack/golden/README.md).

use super::Elem::*;
use super::Shape::*;
use super::{OMIT, PTR, Ty, f};

/// `api/core/v1.AppArmorProfile`
pub(crate) static APP_ARMOR_PROFILE: Ty = Ty {
    fields: &[
        f("type", 0, One, Str),
        f("localhostProfile", OMIT | PTR, One, Str),
    ],
};

/// `api/core/v1.AWSElasticBlockStoreVolumeSource`
pub(crate) static AWS_ELASTIC_BLOCK_STORE_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("volumeID", 0, One, Str),
        f("fsType", OMIT, One, Str),
        f("partition", OMIT, One, Int),
        f("readOnly", OMIT, One, Bool),
    ],
};

/// `api/core/v1.AzureDiskVolumeSource`
pub(crate) static AZURE_DISK_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("diskName", 0, One, Str),
        f("diskURI", 0, One, Str),
        f("cachingMode", OMIT | PTR, One, Str),
        f("fsType", OMIT | PTR, One, Str),
        f("readOnly", OMIT | PTR, One, Bool),
        f("kind", OMIT | PTR, One, Str),
    ],
};

/// `api/core/v1.AzureFileVolumeSource`
pub(crate) static AZURE_FILE_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("secretName", 0, One, Str),
        f("shareName", 0, One, Str),
        f("readOnly", OMIT, One, Bool),
    ],
};

/// `api/core/v1.Capabilities`
pub(crate) static CAPABILITIES: Ty = Ty {
    fields: &[f("add", OMIT, Slice, Str), f("drop", OMIT, Slice, Str)],
};

/// `api/core/v1.CephFSVolumeSource`
pub(crate) static CEPH_FS_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("monitors", 0, Slice, Str),
        f("path", OMIT, One, Str),
        f("user", OMIT, One, Str),
        f("secretFile", OMIT, One, Str),
        f(
            "secretRef",
            OMIT | PTR,
            One,
            Struct(&LOCAL_OBJECT_REFERENCE),
        ),
        f("readOnly", OMIT, One, Bool),
    ],
};

/// `api/core/v1.CinderVolumeSource`
pub(crate) static CINDER_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("volumeID", 0, One, Str),
        f("fsType", OMIT, One, Str),
        f("readOnly", OMIT, One, Bool),
        f(
            "secretRef",
            OMIT | PTR,
            One,
            Struct(&LOCAL_OBJECT_REFERENCE),
        ),
    ],
};

/// `api/core/v1.ClusterTrustBundleProjection`
pub(crate) static CLUSTER_TRUST_BUNDLE_PROJECTION: Ty = Ty {
    fields: &[
        f("name", OMIT | PTR, One, Str),
        f("signerName", OMIT | PTR, One, Str),
        f("labelSelector", OMIT | PTR, One, Struct(&LABEL_SELECTOR)),
        f("optional", OMIT | PTR, One, Bool),
        f("path", 0, One, Str),
        f("user", OMIT | PTR, One, Int),
    ],
};

/// `api/core/v1.ConfigMapEnvSource`
pub(crate) static CONFIG_MAP_ENV_SOURCE: Ty = Ty {
    fields: &[
        f("name", OMIT, One, Str),
        f("optional", OMIT | PTR, One, Bool),
    ],
};

/// `api/core/v1.ConfigMapKeySelector`
pub(crate) static CONFIG_MAP_KEY_SELECTOR: Ty = Ty {
    fields: &[
        f("name", OMIT, One, Str),
        f("key", 0, One, Str),
        f("optional", OMIT | PTR, One, Bool),
    ],
};

/// `api/core/v1.ConfigMapProjection`
pub(crate) static CONFIG_MAP_PROJECTION: Ty = Ty {
    fields: &[
        f("name", OMIT, One, Str),
        f("items", OMIT, Slice, Struct(&KEY_TO_PATH)),
        f("optional", OMIT | PTR, One, Bool),
    ],
};

/// `api/core/v1.ConfigMapVolumeSource`
pub(crate) static CONFIG_MAP_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("name", OMIT, One, Str),
        f("items", OMIT, Slice, Struct(&KEY_TO_PATH)),
        f("defaultMode", OMIT | PTR, One, Int),
        f("optional", OMIT | PTR, One, Bool),
        f("defaultUser", OMIT | PTR, One, Int),
    ],
};

/// `api/core/v1.Container`
pub(crate) static CONTAINER: Ty = Ty {
    fields: &[
        f("name", 0, One, Str),
        f("image", OMIT, One, Str),
        f("command", OMIT, Slice, Str),
        f("args", OMIT, Slice, Str),
        f("workingDir", OMIT, One, Str),
        f("ports", OMIT, Slice, Struct(&CONTAINER_PORT)),
        f("envFrom", OMIT, Slice, Struct(&ENV_FROM_SOURCE)),
        f("env", OMIT, Slice, Struct(&ENV_VAR)),
        f("resources", OMIT, One, Struct(&RESOURCE_REQUIREMENTS)),
        f(
            "resizePolicy",
            OMIT,
            Slice,
            Struct(&CONTAINER_RESIZE_POLICY),
        ),
        f("restartPolicy", OMIT | PTR, One, Str),
        f(
            "restartPolicyRules",
            OMIT,
            Slice,
            Struct(&CONTAINER_RESTART_RULE),
        ),
        f("volumeMounts", OMIT, Slice, Struct(&VOLUME_MOUNT)),
        f("volumeDevices", OMIT, Slice, Struct(&VOLUME_DEVICE)),
        f("livenessProbe", OMIT | PTR, One, Struct(&PROBE)),
        f("readinessProbe", OMIT | PTR, One, Struct(&PROBE)),
        f("startupProbe", OMIT | PTR, One, Struct(&PROBE)),
        f("lifecycle", OMIT | PTR, One, Struct(&LIFECYCLE)),
        f("terminationMessagePath", OMIT, One, Str),
        f("terminationMessagePolicy", OMIT, One, Str),
        f("imagePullPolicy", OMIT, One, Str),
        f(
            "securityContext",
            OMIT | PTR,
            One,
            Struct(&SECURITY_CONTEXT),
        ),
        f("stdin", OMIT, One, Bool),
        f("stdinOnce", OMIT, One, Bool),
        f("tty", OMIT, One, Bool),
    ],
};

/// `api/core/v1.ContainerPort`
pub(crate) static CONTAINER_PORT: Ty = Ty {
    fields: &[
        f("name", OMIT, One, Str),
        f("hostPort", OMIT, One, Int),
        f("containerPort", 0, One, Int),
        f("protocol", OMIT, One, Str),
        f("hostIP", OMIT, One, Str),
    ],
};

/// `api/core/v1.ContainerResizePolicy`
pub(crate) static CONTAINER_RESIZE_POLICY: Ty = Ty {
    fields: &[
        f("resourceName", 0, One, Str),
        f("restartPolicy", 0, One, Str),
    ],
};

/// `api/core/v1.ContainerRestartRule`
pub(crate) static CONTAINER_RESTART_RULE: Ty = Ty {
    fields: &[
        f("action", OMIT, One, Str),
        f(
            "exitCodes",
            OMIT | PTR,
            One,
            Struct(&CONTAINER_RESTART_RULE_ON_EXIT_CODES),
        ),
    ],
};

/// `api/core/v1.ContainerRestartRuleOnExitCodes`
pub(crate) static CONTAINER_RESTART_RULE_ON_EXIT_CODES: Ty = Ty {
    fields: &[f("operator", OMIT, One, Str), f("values", OMIT, Slice, Int)],
};

/// `api/core/v1.CSIVolumeSource`
pub(crate) static CSI_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("driver", 0, One, Str),
        f("readOnly", OMIT | PTR, One, Bool),
        f("fsType", OMIT | PTR, One, Str),
        f("volumeAttributes", OMIT, Map, Str),
        f(
            "nodePublishSecretRef",
            OMIT | PTR,
            One,
            Struct(&LOCAL_OBJECT_REFERENCE),
        ),
    ],
};

/// `api/core/v1.DownwardAPIProjection`
pub(crate) static DOWNWARD_API_PROJECTION: Ty = Ty {
    fields: &[f("items", OMIT, Slice, Struct(&DOWNWARD_API_VOLUME_FILE))],
};

/// `api/core/v1.DownwardAPIVolumeFile`
pub(crate) static DOWNWARD_API_VOLUME_FILE: Ty = Ty {
    fields: &[
        f("path", 0, One, Str),
        f("fieldRef", OMIT | PTR, One, Struct(&OBJECT_FIELD_SELECTOR)),
        f(
            "resourceFieldRef",
            OMIT | PTR,
            One,
            Struct(&RESOURCE_FIELD_SELECTOR),
        ),
        f("mode", OMIT | PTR, One, Int),
        f("user", OMIT | PTR, One, Int),
    ],
};

/// `api/core/v1.DownwardAPIVolumeSource`
pub(crate) static DOWNWARD_API_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("items", OMIT, Slice, Struct(&DOWNWARD_API_VOLUME_FILE)),
        f("defaultMode", OMIT | PTR, One, Int),
        f("defaultUser", OMIT | PTR, One, Int),
    ],
};

/// `api/core/v1.EmptyDirVolumeSource`
pub(crate) static EMPTY_DIR_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("medium", OMIT, One, Str),
        f("sizeLimit", OMIT | PTR, One, Quantity),
        f("mode", OMIT | PTR, One, Int),
    ],
};

/// `api/core/v1.EnvFromSource`
pub(crate) static ENV_FROM_SOURCE: Ty = Ty {
    fields: &[
        f("prefix", OMIT, One, Str),
        f(
            "configMapRef",
            OMIT | PTR,
            One,
            Struct(&CONFIG_MAP_ENV_SOURCE),
        ),
        f("secretRef", OMIT | PTR, One, Struct(&SECRET_ENV_SOURCE)),
    ],
};

/// `api/core/v1.EnvVar`
pub(crate) static ENV_VAR: Ty = Ty {
    fields: &[
        f("name", 0, One, Str),
        f("value", OMIT, One, Str),
        f("valueFrom", OMIT | PTR, One, Struct(&ENV_VAR_SOURCE)),
    ],
};

/// `api/core/v1.EnvVarSource`
pub(crate) static ENV_VAR_SOURCE: Ty = Ty {
    fields: &[
        f("fieldRef", OMIT | PTR, One, Struct(&OBJECT_FIELD_SELECTOR)),
        f(
            "resourceFieldRef",
            OMIT | PTR,
            One,
            Struct(&RESOURCE_FIELD_SELECTOR),
        ),
        f(
            "configMapKeyRef",
            OMIT | PTR,
            One,
            Struct(&CONFIG_MAP_KEY_SELECTOR),
        ),
        f(
            "secretKeyRef",
            OMIT | PTR,
            One,
            Struct(&SECRET_KEY_SELECTOR),
        ),
        f("fileKeyRef", OMIT | PTR, One, Struct(&FILE_KEY_SELECTOR)),
    ],
};

/// `api/core/v1.EphemeralVolumeSource`
pub(crate) static EPHEMERAL_VOLUME_SOURCE: Ty = Ty {
    fields: &[f(
        "volumeClaimTemplate",
        OMIT | PTR,
        One,
        Struct(&PERSISTENT_VOLUME_CLAIM_TEMPLATE),
    )],
};

/// `api/core/v1.ExecAction`
pub(crate) static EXEC_ACTION: Ty = Ty {
    fields: &[f("command", OMIT, Slice, Str)],
};

/// `api/core/v1.FCVolumeSource`
pub(crate) static FC_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("targetWWNs", OMIT, Slice, Str),
        f("lun", OMIT | PTR, One, Int),
        f("fsType", OMIT, One, Str),
        f("readOnly", OMIT, One, Bool),
        f("wwids", OMIT, Slice, Str),
    ],
};

/// `api/core/v1.FileKeySelector`
pub(crate) static FILE_KEY_SELECTOR: Ty = Ty {
    fields: &[
        f("volumeName", 0, One, Str),
        f("path", 0, One, Str),
        f("key", 0, One, Str),
        f("optional", OMIT | PTR, One, Bool),
    ],
};

/// `api/core/v1.FlexVolumeSource`
pub(crate) static FLEX_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("driver", 0, One, Str),
        f("fsType", OMIT, One, Str),
        f(
            "secretRef",
            OMIT | PTR,
            One,
            Struct(&LOCAL_OBJECT_REFERENCE),
        ),
        f("readOnly", OMIT, One, Bool),
        f("options", OMIT, Map, Str),
    ],
};

/// `api/core/v1.FlockerVolumeSource`
pub(crate) static FLOCKER_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("datasetName", OMIT, One, Str),
        f("datasetUUID", OMIT, One, Str),
    ],
};

/// `api/core/v1.GCEPersistentDiskVolumeSource`
pub(crate) static GCE_PERSISTENT_DISK_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("pdName", 0, One, Str),
        f("fsType", OMIT, One, Str),
        f("partition", OMIT, One, Int),
        f("readOnly", OMIT, One, Bool),
    ],
};

/// `api/core/v1.GitRepoVolumeSource`
pub(crate) static GIT_REPO_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("repository", 0, One, Str),
        f("revision", OMIT, One, Str),
        f("directory", OMIT, One, Str),
    ],
};

/// `api/core/v1.GlusterfsVolumeSource`
pub(crate) static GLUSTERFS_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("endpoints", 0, One, Str),
        f("path", 0, One, Str),
        f("readOnly", OMIT, One, Bool),
    ],
};

/// `api/core/v1.GRPCAction`
pub(crate) static GRPC_ACTION: Ty = Ty {
    fields: &[
        f("port", 0, One, Int),
        f("service", PTR, One, Str),
        f("mode", OMIT | PTR, One, Str),
    ],
};

/// `api/core/v1.HostPathVolumeSource`
pub(crate) static HOST_PATH_VOLUME_SOURCE: Ty = Ty {
    fields: &[f("path", 0, One, Str), f("type", OMIT | PTR, One, Str)],
};

/// `api/core/v1.HTTPGetAction`
pub(crate) static HTTP_GET_ACTION: Ty = Ty {
    fields: &[
        f("path", OMIT, One, Str),
        f("port", 0, One, IntOrString),
        f("host", OMIT, One, Str),
        f("scheme", OMIT, One, Str),
        f("httpHeaders", OMIT, Slice, Struct(&HTTP_HEADER)),
        f("protocol", OMIT | PTR, One, Str),
    ],
};

/// `api/core/v1.HTTPHeader`
pub(crate) static HTTP_HEADER: Ty = Ty {
    fields: &[f("name", 0, One, Str), f("value", 0, One, Str)],
};

/// `api/core/v1.ImageVolumeSource`
pub(crate) static IMAGE_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("reference", OMIT, One, Str),
        f("pullPolicy", OMIT, One, Str),
    ],
};

/// `api/core/v1.ISCSIVolumeSource`
pub(crate) static ISCSI_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("targetPortal", 0, One, Str),
        f("iqn", 0, One, Str),
        f("lun", 0, One, Int),
        f("iscsiInterface", OMIT, One, Str),
        f("fsType", OMIT, One, Str),
        f("readOnly", OMIT, One, Bool),
        f("portals", OMIT, Slice, Str),
        f("chapAuthDiscovery", OMIT, One, Bool),
        f("chapAuthSession", OMIT, One, Bool),
        f(
            "secretRef",
            OMIT | PTR,
            One,
            Struct(&LOCAL_OBJECT_REFERENCE),
        ),
        f("initiatorName", OMIT | PTR, One, Str),
    ],
};

/// `api/core/v1.KeyToPath`
pub(crate) static KEY_TO_PATH: Ty = Ty {
    fields: &[
        f("key", 0, One, Str),
        f("path", 0, One, Str),
        f("mode", OMIT | PTR, One, Int),
        f("user", OMIT | PTR, One, Int),
    ],
};

/// `apimachinery/pkg/apis/meta/v1.LabelSelector`
pub(crate) static LABEL_SELECTOR: Ty = Ty {
    fields: &[
        f("matchLabels", OMIT, Map, Str),
        f(
            "matchExpressions",
            OMIT,
            Slice,
            Struct(&LABEL_SELECTOR_REQUIREMENT),
        ),
    ],
};

/// `apimachinery/pkg/apis/meta/v1.LabelSelectorRequirement`
pub(crate) static LABEL_SELECTOR_REQUIREMENT: Ty = Ty {
    fields: &[
        f("key", 0, One, Str),
        f("operator", 0, One, Str),
        f("values", OMIT, Slice, Str),
    ],
};

/// `api/core/v1.Lifecycle`
pub(crate) static LIFECYCLE: Ty = Ty {
    fields: &[
        f("postStart", OMIT | PTR, One, Struct(&LIFECYCLE_HANDLER)),
        f("preStop", OMIT | PTR, One, Struct(&LIFECYCLE_HANDLER)),
        f("stopSignal", OMIT | PTR, One, Str),
    ],
};

/// `api/core/v1.LifecycleHandler`
pub(crate) static LIFECYCLE_HANDLER: Ty = Ty {
    fields: &[
        f("exec", OMIT | PTR, One, Struct(&EXEC_ACTION)),
        f("httpGet", OMIT | PTR, One, Struct(&HTTP_GET_ACTION)),
        f("tcpSocket", OMIT | PTR, One, Struct(&TCP_SOCKET_ACTION)),
        f("sleep", OMIT | PTR, One, Struct(&SLEEP_ACTION)),
    ],
};

/// `api/core/v1.LocalObjectReference`
pub(crate) static LOCAL_OBJECT_REFERENCE: Ty = Ty {
    fields: &[f("name", OMIT, One, Str)],
};

/// `apimachinery/pkg/apis/meta/v1.ManagedFieldsEntry`
pub(crate) static MANAGED_FIELDS_ENTRY: Ty = Ty {
    fields: &[
        f("manager", OMIT, One, Str),
        f("operation", OMIT, One, Str),
        f("apiVersion", OMIT, One, Str),
        f("time", OMIT | PTR, One, Time),
        f("fieldsType", OMIT, One, Str),
        f("fieldsV1", OMIT | PTR, One, Raw),
        f("subresource", OMIT, One, Str),
    ],
};

/// `api/core/v1.NFSVolumeSource`
pub(crate) static NFS_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("server", 0, One, Str),
        f("path", 0, One, Str),
        f("readOnly", OMIT, One, Bool),
    ],
};

/// `api/core/v1.ObjectFieldSelector`
pub(crate) static OBJECT_FIELD_SELECTOR: Ty = Ty {
    fields: &[f("apiVersion", OMIT, One, Str), f("fieldPath", 0, One, Str)],
};

/// `apimachinery/pkg/apis/meta/v1.ObjectMeta`
pub(crate) static OBJECT_META: Ty = Ty {
    fields: &[
        f("name", OMIT, One, Str),
        f("generateName", OMIT, One, Str),
        f("namespace", OMIT, One, Str),
        f("selfLink", OMIT, One, Str),
        f("uid", OMIT, One, Str),
        f("resourceVersion", OMIT, One, Str),
        f("generation", OMIT, One, Int),
        // Go tag also says omitzero (newer apimachinery); OpenKruise v1.9 builds with 0.32,
        // whose encoder writes a zero time as null, and so do we.
        f("creationTimestamp", OMIT, One, Time),
        f("deletionTimestamp", OMIT | PTR, One, Time),
        f("deletionGracePeriodSeconds", OMIT | PTR, One, Int),
        f("labels", OMIT, Map, Str),
        f("annotations", OMIT, Map, Str),
        f("ownerReferences", OMIT, Slice, Struct(&OWNER_REFERENCE)),
        f("finalizers", OMIT, Slice, Str),
        f("managedFields", OMIT, Slice, Struct(&MANAGED_FIELDS_ENTRY)),
    ],
};

/// `apimachinery/pkg/apis/meta/v1.OwnerReference`
pub(crate) static OWNER_REFERENCE: Ty = Ty {
    fields: &[
        f("apiVersion", 0, One, Str),
        f("kind", 0, One, Str),
        f("name", 0, One, Str),
        f("uid", 0, One, Str),
        f("controller", OMIT | PTR, One, Bool),
        f("blockOwnerDeletion", OMIT | PTR, One, Bool),
    ],
};

/// `api/core/v1.PersistentVolumeClaimSpec`
pub(crate) static PERSISTENT_VOLUME_CLAIM_SPEC: Ty = Ty {
    fields: &[
        f("accessModes", OMIT, Slice, Str),
        f("selector", OMIT | PTR, One, Struct(&LABEL_SELECTOR)),
        f(
            "resources",
            OMIT,
            One,
            Struct(&VOLUME_RESOURCE_REQUIREMENTS),
        ),
        f("volumeName", OMIT, One, Str),
        f("storageClassName", OMIT | PTR, One, Str),
        f("volumeMode", OMIT | PTR, One, Str),
        f(
            "dataSource",
            OMIT | PTR,
            One,
            Struct(&TYPED_LOCAL_OBJECT_REFERENCE),
        ),
        f(
            "dataSourceRef",
            OMIT | PTR,
            One,
            Struct(&TYPED_OBJECT_REFERENCE),
        ),
        f("volumeAttributesClassName", OMIT | PTR, One, Str),
    ],
};

/// `api/core/v1.PersistentVolumeClaimTemplate`
pub(crate) static PERSISTENT_VOLUME_CLAIM_TEMPLATE: Ty = Ty {
    fields: &[
        f("metadata", OMIT, One, Struct(&OBJECT_META)),
        f("spec", 0, One, Struct(&PERSISTENT_VOLUME_CLAIM_SPEC)),
    ],
};

/// `api/core/v1.PersistentVolumeClaimVolumeSource`
pub(crate) static PERSISTENT_VOLUME_CLAIM_VOLUME_SOURCE: Ty = Ty {
    fields: &[f("claimName", 0, One, Str), f("readOnly", OMIT, One, Bool)],
};

/// `api/core/v1.PhotonPersistentDiskVolumeSource`
pub(crate) static PHOTON_PERSISTENT_DISK_VOLUME_SOURCE: Ty = Ty {
    fields: &[f("pdID", 0, One, Str), f("fsType", OMIT, One, Str)],
};

/// `api/core/v1.PodCertificateProjection`
pub(crate) static POD_CERTIFICATE_PROJECTION: Ty = Ty {
    fields: &[
        f("signerName", OMIT, One, Str),
        f("keyType", OMIT, One, Str),
        f("maxExpirationSeconds", OMIT | PTR, One, Int),
        f("credentialBundlePath", OMIT, One, Str),
        f("keyPath", OMIT, One, Str),
        f("certificateChainPath", OMIT, One, Str),
        f("userAnnotations", OMIT, Map, Str),
        f("user", OMIT | PTR, One, Int),
    ],
};

/// `api/core/v1.PortworxVolumeSource`
pub(crate) static PORTWORX_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("volumeID", 0, One, Str),
        f("fsType", OMIT, One, Str),
        f("readOnly", OMIT, One, Bool),
    ],
};

/// `api/core/v1.Probe`
pub(crate) static PROBE: Ty = Ty {
    fields: &[
        f("exec", OMIT | PTR, One, Struct(&EXEC_ACTION)),
        f("httpGet", OMIT | PTR, One, Struct(&HTTP_GET_ACTION)),
        f("tcpSocket", OMIT | PTR, One, Struct(&TCP_SOCKET_ACTION)),
        f("grpc", OMIT | PTR, One, Struct(&GRPC_ACTION)),
        f("initialDelaySeconds", OMIT, One, Int),
        f("timeoutSeconds", OMIT, One, Int),
        f("periodSeconds", OMIT, One, Int),
        f("successThreshold", OMIT, One, Int),
        f("failureThreshold", OMIT, One, Int),
        f("terminationGracePeriodSeconds", OMIT | PTR, One, Int),
    ],
};

/// `api/core/v1.ProjectedVolumeSource`
pub(crate) static PROJECTED_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("sources", 0, Slice, Struct(&VOLUME_PROJECTION)),
        f("defaultMode", OMIT | PTR, One, Int),
        f("defaultUser", OMIT | PTR, One, Int),
    ],
};

/// `api/core/v1.QuobyteVolumeSource`
pub(crate) static QUOBYTE_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("registry", 0, One, Str),
        f("volume", 0, One, Str),
        f("readOnly", OMIT, One, Bool),
        f("user", OMIT, One, Str),
        f("group", OMIT, One, Str),
        f("tenant", OMIT, One, Str),
    ],
};

/// `api/core/v1.RBDVolumeSource`
pub(crate) static RBD_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("monitors", 0, Slice, Str),
        f("image", 0, One, Str),
        f("fsType", OMIT, One, Str),
        f("pool", OMIT, One, Str),
        f("user", OMIT, One, Str),
        f("keyring", OMIT, One, Str),
        f(
            "secretRef",
            OMIT | PTR,
            One,
            Struct(&LOCAL_OBJECT_REFERENCE),
        ),
        f("readOnly", OMIT, One, Bool),
    ],
};

/// `api/core/v1.ResourceClaim`
pub(crate) static RESOURCE_CLAIM: Ty = Ty {
    fields: &[f("name", 0, One, Str), f("request", OMIT, One, Str)],
};

/// `api/core/v1.ResourceFieldSelector`
pub(crate) static RESOURCE_FIELD_SELECTOR: Ty = Ty {
    fields: &[
        f("containerName", OMIT, One, Str),
        f("resource", 0, One, Str),
        f("divisor", OMIT, One, Quantity),
    ],
};

/// `api/core/v1.ResourceRequirements`
pub(crate) static RESOURCE_REQUIREMENTS: Ty = Ty {
    fields: &[
        f("limits", OMIT, Map, Quantity),
        f("requests", OMIT, Map, Quantity),
        f("claims", OMIT, Slice, Struct(&RESOURCE_CLAIM)),
    ],
};

/// `api/core/v1.ScaleIOVolumeSource`
pub(crate) static SCALE_IO_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("gateway", 0, One, Str),
        f("system", 0, One, Str),
        f("secretRef", PTR, One, Struct(&LOCAL_OBJECT_REFERENCE)),
        f("sslEnabled", OMIT, One, Bool),
        f("protectionDomain", OMIT, One, Str),
        f("storagePool", OMIT, One, Str),
        f("storageMode", OMIT, One, Str),
        f("volumeName", OMIT, One, Str),
        f("fsType", OMIT, One, Str),
        f("readOnly", OMIT, One, Bool),
    ],
};

/// `api/core/v1.SeccompProfile`
pub(crate) static SECCOMP_PROFILE: Ty = Ty {
    fields: &[
        f("type", 0, One, Str),
        f("localhostProfile", OMIT | PTR, One, Str),
    ],
};

/// `api/core/v1.SecretEnvSource`
pub(crate) static SECRET_ENV_SOURCE: Ty = Ty {
    fields: &[
        f("name", OMIT, One, Str),
        f("optional", OMIT | PTR, One, Bool),
    ],
};

/// `api/core/v1.SecretKeySelector`
pub(crate) static SECRET_KEY_SELECTOR: Ty = Ty {
    fields: &[
        f("name", OMIT, One, Str),
        f("key", 0, One, Str),
        f("optional", OMIT | PTR, One, Bool),
    ],
};

/// `api/core/v1.SecretProjection`
pub(crate) static SECRET_PROJECTION: Ty = Ty {
    fields: &[
        f("name", OMIT, One, Str),
        f("items", OMIT, Slice, Struct(&KEY_TO_PATH)),
        f("optional", OMIT | PTR, One, Bool),
    ],
};

/// `api/core/v1.SecretVolumeSource`
pub(crate) static SECRET_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("secretName", OMIT, One, Str),
        f("items", OMIT, Slice, Struct(&KEY_TO_PATH)),
        f("defaultMode", OMIT | PTR, One, Int),
        f("optional", OMIT | PTR, One, Bool),
        f("defaultUser", OMIT | PTR, One, Int),
    ],
};

/// `api/core/v1.SecurityContext`
pub(crate) static SECURITY_CONTEXT: Ty = Ty {
    fields: &[
        f("capabilities", OMIT | PTR, One, Struct(&CAPABILITIES)),
        f("privileged", OMIT | PTR, One, Bool),
        f("seLinuxOptions", OMIT | PTR, One, Struct(&SE_LINUX_OPTIONS)),
        f(
            "windowsOptions",
            OMIT | PTR,
            One,
            Struct(&WINDOWS_SECURITY_CONTEXT_OPTIONS),
        ),
        f("runAsUser", OMIT | PTR, One, Int),
        f("runAsGroup", OMIT | PTR, One, Int),
        f("runAsNonRoot", OMIT | PTR, One, Bool),
        f("readOnlyRootFilesystem", OMIT | PTR, One, Bool),
        f("allowPrivilegeEscalation", OMIT | PTR, One, Bool),
        f("procMount", OMIT | PTR, One, Str),
        f("seccompProfile", OMIT | PTR, One, Struct(&SECCOMP_PROFILE)),
        f(
            "appArmorProfile",
            OMIT | PTR,
            One,
            Struct(&APP_ARMOR_PROFILE),
        ),
    ],
};

/// `api/core/v1.ServiceAccountTokenProjection`
pub(crate) static SERVICE_ACCOUNT_TOKEN_PROJECTION: Ty = Ty {
    fields: &[
        f("audience", OMIT, One, Str),
        f("expirationSeconds", OMIT | PTR, One, Int),
        f("path", 0, One, Str),
        f("user", OMIT | PTR, One, Int),
    ],
};

/// `api/core/v1.SELinuxOptions`
pub(crate) static SE_LINUX_OPTIONS: Ty = Ty {
    fields: &[
        f("user", OMIT, One, Str),
        f("role", OMIT, One, Str),
        f("type", OMIT, One, Str),
        f("level", OMIT, One, Str),
    ],
};

/// `api/core/v1.SleepAction`
pub(crate) static SLEEP_ACTION: Ty = Ty {
    fields: &[f("seconds", 0, One, Int)],
};

/// `api/core/v1.StorageOSVolumeSource`
pub(crate) static STORAGE_OS_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("volumeName", OMIT, One, Str),
        f("volumeNamespace", OMIT, One, Str),
        f("fsType", OMIT, One, Str),
        f("readOnly", OMIT, One, Bool),
        f(
            "secretRef",
            OMIT | PTR,
            One,
            Struct(&LOCAL_OBJECT_REFERENCE),
        ),
    ],
};

/// `api/core/v1.TCPSocketAction`
pub(crate) static TCP_SOCKET_ACTION: Ty = Ty {
    fields: &[f("port", 0, One, IntOrString), f("host", OMIT, One, Str)],
};

/// `api/core/v1.TypedLocalObjectReference`
pub(crate) static TYPED_LOCAL_OBJECT_REFERENCE: Ty = Ty {
    fields: &[
        f("apiGroup", PTR, One, Str),
        f("kind", 0, One, Str),
        f("name", 0, One, Str),
    ],
};

/// `api/core/v1.TypedObjectReference`
pub(crate) static TYPED_OBJECT_REFERENCE: Ty = Ty {
    fields: &[
        f("apiGroup", PTR, One, Str),
        f("kind", 0, One, Str),
        f("name", 0, One, Str),
        f("namespace", OMIT | PTR, One, Str),
    ],
};

/// `api/core/v1.Volume`
pub(crate) static VOLUME: Ty = Ty {
    fields: &[
        f("name", 0, One, Str),
        f(
            "hostPath",
            OMIT | PTR,
            One,
            Struct(&HOST_PATH_VOLUME_SOURCE),
        ),
        f(
            "emptyDir",
            OMIT | PTR,
            One,
            Struct(&EMPTY_DIR_VOLUME_SOURCE),
        ),
        f(
            "gcePersistentDisk",
            OMIT | PTR,
            One,
            Struct(&GCE_PERSISTENT_DISK_VOLUME_SOURCE),
        ),
        f(
            "awsElasticBlockStore",
            OMIT | PTR,
            One,
            Struct(&AWS_ELASTIC_BLOCK_STORE_VOLUME_SOURCE),
        ),
        f("gitRepo", OMIT | PTR, One, Struct(&GIT_REPO_VOLUME_SOURCE)),
        f("secret", OMIT | PTR, One, Struct(&SECRET_VOLUME_SOURCE)),
        f("nfs", OMIT | PTR, One, Struct(&NFS_VOLUME_SOURCE)),
        f("iscsi", OMIT | PTR, One, Struct(&ISCSI_VOLUME_SOURCE)),
        f(
            "glusterfs",
            OMIT | PTR,
            One,
            Struct(&GLUSTERFS_VOLUME_SOURCE),
        ),
        f(
            "persistentVolumeClaim",
            OMIT | PTR,
            One,
            Struct(&PERSISTENT_VOLUME_CLAIM_VOLUME_SOURCE),
        ),
        f("rbd", OMIT | PTR, One, Struct(&RBD_VOLUME_SOURCE)),
        f("flexVolume", OMIT | PTR, One, Struct(&FLEX_VOLUME_SOURCE)),
        f("cinder", OMIT | PTR, One, Struct(&CINDER_VOLUME_SOURCE)),
        f("cephfs", OMIT | PTR, One, Struct(&CEPH_FS_VOLUME_SOURCE)),
        f("flocker", OMIT | PTR, One, Struct(&FLOCKER_VOLUME_SOURCE)),
        f(
            "downwardAPI",
            OMIT | PTR,
            One,
            Struct(&DOWNWARD_API_VOLUME_SOURCE),
        ),
        f("fc", OMIT | PTR, One, Struct(&FC_VOLUME_SOURCE)),
        f(
            "azureFile",
            OMIT | PTR,
            One,
            Struct(&AZURE_FILE_VOLUME_SOURCE),
        ),
        f(
            "configMap",
            OMIT | PTR,
            One,
            Struct(&CONFIG_MAP_VOLUME_SOURCE),
        ),
        f(
            "vsphereVolume",
            OMIT | PTR,
            One,
            Struct(&VSPHERE_VIRTUAL_DISK_VOLUME_SOURCE),
        ),
        f("quobyte", OMIT | PTR, One, Struct(&QUOBYTE_VOLUME_SOURCE)),
        f(
            "azureDisk",
            OMIT | PTR,
            One,
            Struct(&AZURE_DISK_VOLUME_SOURCE),
        ),
        f(
            "photonPersistentDisk",
            OMIT | PTR,
            One,
            Struct(&PHOTON_PERSISTENT_DISK_VOLUME_SOURCE),
        ),
        f(
            "projected",
            OMIT | PTR,
            One,
            Struct(&PROJECTED_VOLUME_SOURCE),
        ),
        f(
            "portworxVolume",
            OMIT | PTR,
            One,
            Struct(&PORTWORX_VOLUME_SOURCE),
        ),
        f("scaleIO", OMIT | PTR, One, Struct(&SCALE_IO_VOLUME_SOURCE)),
        f(
            "storageos",
            OMIT | PTR,
            One,
            Struct(&STORAGE_OS_VOLUME_SOURCE),
        ),
        f("csi", OMIT | PTR, One, Struct(&CSI_VOLUME_SOURCE)),
        f(
            "ephemeral",
            OMIT | PTR,
            One,
            Struct(&EPHEMERAL_VOLUME_SOURCE),
        ),
        f("image", OMIT | PTR, One, Struct(&IMAGE_VOLUME_SOURCE)),
    ],
};

/// `api/core/v1.VolumeDevice`
pub(crate) static VOLUME_DEVICE: Ty = Ty {
    fields: &[f("name", 0, One, Str), f("devicePath", 0, One, Str)],
};

/// `api/core/v1.VolumeMount`
pub(crate) static VOLUME_MOUNT: Ty = Ty {
    fields: &[
        f("name", 0, One, Str),
        f("readOnly", OMIT, One, Bool),
        f("recursiveReadOnly", OMIT | PTR, One, Str),
        f("mountPath", 0, One, Str),
        f("subPath", OMIT, One, Str),
        f("mountPropagation", OMIT | PTR, One, Str),
        f("subPathExpr", OMIT, One, Str),
        f("bindMountOptions", OMIT, Slice, Str),
    ],
};

/// `api/core/v1.VolumeProjection`
pub(crate) static VOLUME_PROJECTION: Ty = Ty {
    fields: &[
        f("secret", OMIT | PTR, One, Struct(&SECRET_PROJECTION)),
        f(
            "downwardAPI",
            OMIT | PTR,
            One,
            Struct(&DOWNWARD_API_PROJECTION),
        ),
        f("configMap", OMIT | PTR, One, Struct(&CONFIG_MAP_PROJECTION)),
        f(
            "serviceAccountToken",
            OMIT | PTR,
            One,
            Struct(&SERVICE_ACCOUNT_TOKEN_PROJECTION),
        ),
        f(
            "clusterTrustBundle",
            OMIT | PTR,
            One,
            Struct(&CLUSTER_TRUST_BUNDLE_PROJECTION),
        ),
        f(
            "podCertificate",
            OMIT | PTR,
            One,
            Struct(&POD_CERTIFICATE_PROJECTION),
        ),
    ],
};

/// `api/core/v1.VolumeResourceRequirements`
pub(crate) static VOLUME_RESOURCE_REQUIREMENTS: Ty = Ty {
    fields: &[
        f("limits", OMIT, Map, Quantity),
        f("requests", OMIT, Map, Quantity),
    ],
};

/// `api/core/v1.VsphereVirtualDiskVolumeSource`
pub(crate) static VSPHERE_VIRTUAL_DISK_VOLUME_SOURCE: Ty = Ty {
    fields: &[
        f("volumePath", 0, One, Str),
        f("fsType", OMIT, One, Str),
        f("storagePolicyName", OMIT, One, Str),
        f("storagePolicyID", OMIT, One, Str),
    ],
};

/// `api/core/v1.WindowsSecurityContextOptions`
pub(crate) static WINDOWS_SECURITY_CONTEXT_OPTIONS: Ty = Ty {
    fields: &[
        f("gmsaCredentialSpecName", OMIT | PTR, One, Str),
        f("gmsaCredentialSpec", OMIT | PTR, One, Str),
        f("runAsUserName", OMIT | PTR, One, Str),
        f("hostProcess", OMIT | PTR, One, Bool),
    ],
};
