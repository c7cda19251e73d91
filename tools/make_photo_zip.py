"""Make the photo zip a workshop hands out for notebook 03 ("Is it a bird?").

    .venv/bin/python tools/make_photo_zip.py                      # from a run of 03: data/bird_or_not
    .venv/bin/python tools/make_photo_zip.py ~/photos -o room42.zip --labels cat dog

The source is a folder with one subfolder of photos per label (`bird/`, `forest/`): what notebook 03
leaves in `data/bird_or_not/` after a run with internet, or a folder you filled yourself. The zip holds
`<folder name>/<label>/<photo>` for every photo that opens and decodes (Pillow reads all of its pixels);
anything else (the search manifest, a web page saved as .jpg, a photo cut short) stays out and is counted.
Notebook 03 finds the zip beside itself, in its data/ folder, at the path in PHOTO_ZIP, attached on
Kaggle, or uploaded on Colab, and unpacks it with the same checks.
"""
import argparse
import sys
import zipfile
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
PICTURE_SUFFIXES = {".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"}
MIN_PER_CLASS = 50  # notebook 03's MIN_IMAGES_PER_CLASS at full size: fewer and it searches again


def decodes(path):
    """True when Pillow opens `path` and decodes all of its pixels."""
    try:
        with Image.open(path) as picture:
            picture.load()
    except Exception:  # not a picture, empty, cut short: notebook 03 could not use it either
        return False
    return True


def photos_by_label(source, labels):
    """{label: ([photos that decode], [other files])} for each label's subfolder of `source`."""
    found = {}
    for label in labels:
        files = sorted(path for path in (Path(source) / label).glob("*") if path.is_file())
        good = [path for path in files if path.suffix.lower() in PICTURE_SUFFIXES and decodes(path)]
        found[label] = (good, [path for path in files if path not in good])
    return found


def make_photo_zip(source, output, labels=("bird", "forest")):
    """Write the photos of source/<label> that decode into the zip `output`; returns
    {label: (photos written, files left out)}."""
    source, output = Path(source), Path(output)
    found = photos_by_label(source, labels)
    output.parent.mkdir(parents=True, exist_ok=True)
    # JPEGs are compressed already: storing them is as small and much faster than deflating them
    with zipfile.ZipFile(output, "w", compression=zipfile.ZIP_STORED) as archive:
        for label, (good, _) in found.items():
            for path in good:
                archive.write(path, f"{source.name}/{label}/{path.name}")
    return {label: (len(good), len(left_out)) for label, (good, left_out) in found.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", default=REPO / "data" / "bird_or_not",
                        help="a folder with one subfolder of photos per label (default: %(default)s)")
    parser.add_argument("-o", "--output", default=None,
                        help="the zip to write (default: <source name>.zip beside the source)")
    parser.add_argument("--labels", nargs="+", default=["bird", "forest"],
                        help="the subfolders to take, one per label (default: bird forest)")
    args = parser.parse_args(argv)
    source = Path(args.source)
    missing = [label for label in args.labels if not (source / label).is_dir()]
    if missing:
        print(f"{source} has no subfolder {', '.join(missing)}: give a folder with one subfolder of "
              f"photos per label, such as notebook 03's data/bird_or_not after a run with internet.")
        return 2
    output = Path(args.output) if args.output else source.with_name(f"{source.name}.zip")
    counts = make_photo_zip(source, output, args.labels)
    for label, (written, left_out) in counts.items():
        print(f"{label}: {written} photos" + (f", {left_out} other files left out" if left_out else ""))
    print(f"Wrote {output} ({output.stat().st_size / 1e6:.1f} MB).")
    few = [label for label, (written, _) in counts.items() if written < MIN_PER_CLASS]
    if few:
        print(f"Warning: fewer than {MIN_PER_CLASS} photos for {', '.join(few)}: notebook 03 at full "
              f"size then searches again instead of using the zip.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
