fn main() {
    let args: Vec<String> = std::env::args().collect();
    let m =
        crashfs::Mounted::mount(args[1].as_ref(), args[2].as_ref(), Default::default()).unwrap();
    let mut s = String::new();
    std::io::stdin().read_line(&mut s).unwrap();
    eprintln!("{:?}", m.handle().stats());
    let r = m.handle().cut(crashfs::CutPolicy::DropAll, 1).unwrap();
    eprintln!("{r:?}");
    m.unmount().unwrap();
}
