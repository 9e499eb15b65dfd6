"""What comes in from the field as recorded: camera deployments at their stations, and the annotations (boxes,
a detector's or a curator's) on their photos. The lowest of db's areas: the import writes them, and every field
estimate and identification reads them."""
