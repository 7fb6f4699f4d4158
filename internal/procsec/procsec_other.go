//go:build !linux

package procsec

func harden() error      { return nil }
func dumpable() bool     { return true }
func scrubEnvironBlock() {}
