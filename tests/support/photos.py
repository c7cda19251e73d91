"""Made-up photos for the tests of notebook 03 and of the tools around it: good JPEGs, a prepared
folder of two classes, and the three broken files met in real folders."""
import io

from PIL import Image


def jpeg_bytes(width, height, colour=(200, 120, 40)):
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


LABELS = ("bird", "forest")


def plant_broken_pictures(folder):
    """The three broken files met in real folders: empty, a web page named .jpg, a JPEG cut after 300 bytes."""
    files = {"empty.jpg": b"", "page.jpg": b"<html><body>Access denied</body></html>",
             "cut.jpg": jpeg_bytes(400, 300)[:300]}
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return files


def make_photo_folder(folder, per_class):
    """A prepared dataset folder: `per_class` good JPEGs in folder/bird and folder/forest."""
    for label, colour in zip(LABELS, ((200, 60, 40), (30, 140, 50))):
        (folder / label).mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            shade = tuple((channel + 7 * index) % 256 for channel in colour)
            (folder / label / f"photo_{index:03d}.jpg").write_bytes(jpeg_bytes(80, 60, shade))


def files_in(folder):
    return {file.name: file.read_bytes() for file in folder.iterdir()} if folder.is_dir() else {}
