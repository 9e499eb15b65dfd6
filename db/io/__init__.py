"""What comes in and goes out whole: the import of photos, folders, zips and packages, and the catalogue
zip export."""
