//! The little of Kubernetes' protobuf encoding that kubectl sends where it does not fall back to
//! JSON: `kubectl create namespace` posts a `v1.Namespace` as `application/vnd.kubernetes.protobuf`
//! (found by the differential test against the real kube-apiserver). Only Namespaces are decoded,
//! into the JSON the rest of the simulator works with; anything else stays 415.
//!
//! Wire format: the magic `k8s\0`, then a `runtime.Unknown` message (1: typeMeta {1: apiVersion,
//! 2: kind}, 2: raw) whose `raw` is the object: `v1.Namespace` {1: metadata, 2: spec, 3: status},
//! `ObjectMeta` {1: name, 2: generateName, 11: labels, 12: annotations}, a map entry {1: key,
//! 2: value} (k8s.io/api core/v1 and apimachinery meta/v1 `generated.proto`). Hand-written rather
//! than a protobuf crate: without the generated Kubernetes types a crate would only add the same
//! few lines of wire decoding.

use serde_json::{Map, Value, json};

use super::status::ApiError;

/// The protobuf media type of the Kubernetes API.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

/// One protobuf field: its number and, for length-delimited fields, its bytes.
enum Field<'a> {
    Bytes(u32, &'a [u8]),
    Other,
}

/// The fields of one message, in order; an error for a truncated or malformed message.
fn fields(mut data: &[u8]) -> Result<Vec<Field<'_>>, String> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let (key, rest) = varint(data)?;
        data = rest;
        let number = u32::try_from(key >> 3).map_err(|_| "field number out of range")?;
        match key & 7 {
            0 => data = varint(data)?.1,
            1 => data = data.get(8..).ok_or("truncated fixed64")?,
            5 => data = data.get(4..).ok_or("truncated fixed32")?,
            2 => {
                let (len, rest) = varint(data)?;
                let len = usize::try_from(len).map_err(|_| "length out of range")?;
                let bytes = rest.get(..len).ok_or("truncated length-delimited field")?;
                out.push(Field::Bytes(number, bytes));
                data = &rest[len..];
                continue;
            }
            other => return Err(format!("unsupported wire type {other}")),
        }
        out.push(Field::Other);
    }
    Ok(out)
}

fn varint(data: &[u8]) -> Result<(u64, &[u8]), String> {
    let mut value = 0u64;
    for (i, byte) in data.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, &data[i + 1..]));
        }
    }
    Err("malformed varint".to_owned())
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string that is not UTF-8".to_owned())
}

/// Bytes of the first field `number`.
fn field<'a>(fields: &[Field<'a>], number: u32) -> Option<&'a [u8]> {
    fields.iter().find_map(|f| match f {
        Field::Bytes(n, b) if *n == number => Some(*b),
        _ => None,
    })
}

/// A `map<string, string>` from its repeated entries `number`.
fn string_map(fields: &[Field<'_>], number: u32) -> Result<Option<Map<String, Value>>, String> {
    let mut map = Map::new();
    for f in fields {
        if let Field::Bytes(n, entry) = f
            && *n == number
        {
            let entry = self::fields(entry)?;
            let key = text(field(&entry, 1).unwrap_or_default())?;
            let value = text(field(&entry, 2).unwrap_or_default())?;
            map.insert(key, Value::String(value));
        }
    }
    Ok((!map.is_empty()).then_some(map))
}

fn object_meta(data: &[u8]) -> Result<Value, String> {
    let meta = fields(data)?;
    let mut out = Map::new();
    for (number, key) in [(1, "name"), (2, "generateName")] {
        if let Some(b) = field(&meta, number) {
            out.insert(key.to_owned(), Value::String(text(b)?));
        }
    }
    for (number, key) in [(11, "labels"), (12, "annotations")] {
        if let Some(map) = string_map(&meta, number)? {
            out.insert(key.to_owned(), Value::Object(map));
        }
    }
    Ok(Value::Object(out))
}

/// Decode a protobuf request body into the object's JSON; 415 for kinds not decoded here, 400
/// for a malformed body.
pub(crate) fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let bad = |why: String| ApiError::bad_request(format!("error decoding request body: {why}"));
    let message = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("no protobuf envelope".to_owned()))?;
    let unknown = fields(message).map_err(bad)?;
    let type_meta = fields(field(&unknown, 1).unwrap_or_default()).map_err(bad)?;
    let api_version = text(field(&type_meta, 1).unwrap_or_default()).map_err(bad)?;
    let kind = text(field(&type_meta, 2).unwrap_or_default()).map_err(bad)?;
    if (api_version.as_str(), kind.as_str()) != ("v1", "Namespace") {
        return Err(ApiError::unsupported_media_type(&["application/json"]));
    }
    let object = fields(field(&unknown, 2).unwrap_or_default()).map_err(bad)?;
    let metadata = object_meta(field(&object, 1).unwrap_or_default()).map_err(bad)?;
    Ok(json!({ "apiVersion": api_version, "kind": kind, "metadata": metadata }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_field(number: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![u8::try_from(number << 3 | 2).unwrap()];
        out.push(u8::try_from(bytes.len()).unwrap());
        out.extend_from_slice(bytes);
        out
    }

    fn namespace(name: &str, labels: &[(&str, &str)]) -> Vec<u8> {
        let mut meta = bytes_field(1, name.as_bytes());
        for (k, v) in labels {
            let mut entry = bytes_field(1, k.as_bytes());
            entry.extend(bytes_field(2, v.as_bytes()));
            meta.extend(bytes_field(11, &entry));
        }
        let mut object = bytes_field(1, &meta);
        object.extend(bytes_field(2, &[]));
        let mut type_meta = bytes_field(1, b"v1");
        type_meta.extend(bytes_field(2, b"Namespace"));
        let mut unknown = bytes_field(1, &type_meta);
        unknown.extend(bytes_field(2, &object));
        // contentEncoding and contentType, empty, as kubectl sends them.
        unknown.extend(bytes_field(3, b""));
        unknown.extend(bytes_field(4, b""));
        [MAGIC, &unknown].concat()
    }

    #[test]
    fn decodes_a_namespace_as_kubectl_sends_it() {
        let decoded = decode(&namespace("team-a", &[("env", "prod")])).unwrap();
        assert_eq!(
            decoded,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "team-a", "labels": {"env": "prod"}}})
        );
    }

    #[test]
    fn other_kinds_are_415_and_garbage_is_400() {
        let mut pod = namespace("p", &[]);
        let at = pod.windows(9).position(|w| w == b"Namespace").unwrap();
        pod.splice(at..at + 9, b"NamespaXe".iter().copied());
        assert_eq!(decode(&pod).unwrap_err().code, 415);
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
        let whole = namespace("team-a", &[]);
        for cut in 5..whole.len() - 1 {
            // Every truncation is an error, never a panic.
            let _ = decode(&whole[..cut]);
        }
        assert_eq!(decode(&whole[..whole.len() - 6]).unwrap_err().code, 400);
    }
}
