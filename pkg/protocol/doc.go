// Package protocol is toolfleet's wire vocabulary, version 1: the messages that
// travel between coordinators, toolworkers and operators, the subjects they
// travel on, the headers they carry, the outcome codes of a tool call and the
// digest that binds an approval to one call's arguments.
//
// It imports nothing of toolfleet's and holds no NATS connection, so every
// other package — and any program in another language that wants to speak to
// the fleet — can share it.
//
// # Invariants
//
//   - Subjects are spelled only here. Every token that becomes part of a subject
//     is checked against [TokenPattern]; a model-provided string never becomes a
//     subject token unless it is a valid tool name.
//   - Every message carries "v": 1. Decoders refuse other versions, missing
//     required fields, unknown fields, trailing data and payloads over the
//     caller's limit, each with an [*Error] whose code callers can branch on
//     with errors.Is.
//
// # Caveats
//
// Decoding checks shape, not authority: a well-formed message may still be
// forged. Authority comes from NATS permissions (who may publish where) and,
// for approvals, from the digest that binds a decision to one exact call.
package protocol
