//! The deskgym wire contract, generated from `proto/deskgym/v1/*.proto`.
//!
//! The `.proto` files are the single source of truth: this crate holds no logic, only the
//! generated messages, the `Deskgym` service trait (server) and its client, and the
//! codec they use ([`codec::Codec`]: prost with one status code changed).

#![allow(missing_docs, unreachable_pub, clippy::all)]

/// Version 1 of the deskgym protocol (`package deskgym.v1`).
pub mod v1 {
    tonic::include_proto!("deskgym.v1");
}

/// The codec of the generated service and client.
pub mod codec {
    use std::marker::PhantomData;

    use prost::Message;
    use tonic::Status;
    use tonic::codec::DecodeBuf;

    /// `tonic_prost::ProstCodec`, except that bytes that do not decode as the expected
    /// message answer INVALID_ARGUMENT (the caller sent them) instead of INTERNAL
    /// (which our error table reserves for server bugs).
    #[derive(Debug, Clone)]
    pub struct Codec<T, U>(PhantomData<(T, U)>);

    impl<T, U> Default for Codec<T, U> {
        fn default() -> Self {
            Self(PhantomData)
        }
    }

    impl<T, U> tonic::codec::Codec for Codec<T, U>
    where
        T: Message + Send + 'static,
        U: Message + Default + Send + 'static,
    {
        type Encode = T;
        type Decode = U;
        type Encoder = tonic_prost::ProstEncoder<T>;
        type Decoder = Decoder<U>;

        fn encoder(&mut self) -> Self::Encoder {
            tonic_prost::ProstEncoder::default()
        }

        fn decoder(&mut self) -> Self::Decoder {
            Decoder(tonic_prost::ProstDecoder::default())
        }
    }

    /// Decodes with prost; a decode error is INVALID_ARGUMENT naming the message type.
    #[derive(Debug)]
    pub struct Decoder<U>(tonic_prost::ProstDecoder<U>);

    impl<U: Message + Default> tonic::codec::Decoder for Decoder<U> {
        type Item = U;
        type Error = Status;

        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
            self.0.decode(buf).map_err(|s| {
                let name = std::any::type_name::<U>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("message");
                Status::invalid_argument(format!(
                    "the bytes sent do not decode as a deskgym.v1.{name}: {}",
                    s.message()
                ))
            })
        }

        fn buffer_settings(&self) -> tonic::codec::BufferSettings {
            self.0.buffer_settings()
        }
    }
}
