//go:build unix

package termui

import (
	"os"

	"golang.org/x/sys/unix"
)

// Width returns the width of the terminal f, in columns, or 0 when it
// cannot tell.
func Width(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
