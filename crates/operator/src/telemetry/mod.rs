//! Logs and OpenTelemetry traces ([`otel`]), and the TLS of the OTLP exporter ([`otlp_tls`]).
//! Metrics are in [`crate::metrics`].

pub mod otel;
pub mod otlp_tls;
