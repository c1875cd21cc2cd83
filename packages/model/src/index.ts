/**
 * @maka/model public entry. The package is laid out by the monorepo foundation and filled by
 * its own issue; see DESIGN.md §2 for what it owns.
 */
export {}
