// Package sqltext builds the placeholder lists of statements whose size depends on
// their input (IN lists, multi-row VALUES), written with ? (rebind for other
// styles).
package sqltext

import "strings"

// Params renders n comma-separated parameters: "?,?,?".
func Params(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

// Rows renders n rows of width parameters for a VALUES clause: "(?,?),(?,?)".
func Rows(n, width int) string {
	return strings.TrimSuffix(strings.Repeat("("+Params(width)+"),", n), ",")
}
