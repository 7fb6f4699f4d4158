//go:build !linux

package procsec

func harden() error      { return nil }
func scrubEnvironBlock() {}
