// Package config holds the one contract every configuration error of
// toolfleet's libraries keeps: an [Error] names the Go field of the
// library's configuration struct whose value cannot work, and the problem
// with it.
//
// Each library validates its own configuration once and returns errors of
// this shape, alone or joined with [errors.Join]. Commands alone know how a
// field is set (a flag, an environment variable): they find the errors with
// [Errors] and map each field to its flag.
package config
