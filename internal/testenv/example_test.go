package testenv_test

import (
	"fmt"
	"os"

	"github.com/vigil-storage/vigil/internal/testenv"
)

// Strict tells whether a missing prerequisite fails (CI) or skips (a
// developer's machine); a value it does not know is an error naming it.
func ExampleStrict() {
	defer os.Setenv(testenv.RequireAllEnv, os.Getenv(testenv.RequireAllEnv))
	defer os.Setenv(testenv.CIEnv, os.Getenv(testenv.CIEnv))
	for _, v := range []string{"1", "0", "yes"} {
		os.Setenv(testenv.CIEnv, "")
		os.Setenv(testenv.RequireAllEnv, v)
		strict, err := testenv.Strict()
		fmt.Println(v, strict, err)
	}
	// Output:
	// 1 true <nil>
	// 0 false <nil>
	// yes false VIGIL_REQUIRE_ALL="yes": want 1 or true (missing prerequisites fail), 0, false or empty (they skip)
}
