//go:build !unix

package termui

import "os"

// Width returns the width of the terminal f, in columns, or 0 when it
// cannot tell (always, here).
func Width(*os.File) int { return 0 }
