// Package modeltest is the HTTP scaffolding the strict fake model servers
// share (openaitest, anthropictest, responsestest): an httptest server
// whose Close releases hanging replies, the bound on a request body, a log
// of the requests received and refused, scripted answers in sequence, and
// the HTTP part of a reply (status, headers, a verbatim body, a hang, a
// dropped connection).
//
// Each fake keeps its API's own rules where they are: the paths, the
// authentication header, the transcript checks and the bodies it builds.
package modeltest
