//! The SLM gRPC contracts, generated at build time from `proto/slm/v1`.

#[allow(clippy::large_enum_variant)]
pub mod v1 {
    tonic::include_proto!("slm.v1");
}

/// Encoded `FileDescriptorSet` of every contract, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/slm_descriptor.bin"));
